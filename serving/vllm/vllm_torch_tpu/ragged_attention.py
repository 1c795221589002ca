"""Ragged paged attention as one XLA program for a whole batch (JAX, through
torch_tpu.kernels): a loop on the device over the batch's (row, KV block) pairs.

A batch's queries are laid out on the host in rows (`RowLayout`): a decode (one
query) a row, a prefill a row for each PREFILL_ROW of its queries. Each row attends
to the KV blocks its queries can see, from the first block its window reaches to the
block of its last query; the (row, block) pairs of all rows, in row order, are the
batch's work items. The program takes tiles of a fixed number of items in a
`while` loop whose trip count is the batch's (a value, not a shape) and merges
each tile into the running maximum, sum and output of the tiles' queries (online
softmax). Its shapes depend on the batch's token count (padded to a bucket) alone: one
program a token bucket and kind of layer, whatever the batch's lengths, and work in
proportion to the blocks the batch attends to, not to its longest request.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# The queries of a prefill row.
PREFILL_ROW = 16
# A row's fields, each an int32 row of RowLayout.arrays (the last column is a row
# without queries, which padding items and padding rows use).
REQUEST, FIRST_TOKEN, QUERIES, POSITION, LENGTH, FIRST_BLOCK, FIRST_ITEM = range(7)
NUM_FIELDS = 7
# Stands for -inf in running maxima: exp of a difference of two stays finite.
NEGATIVE = -1e30
# The most elements of a tile's largest intermediates (its keys and values, queries,
# scores and outputs).
TILE_ELEMENTS = 1 << 22
MAX_TILE_ITEMS = 128


def tile_items(per_row: int, block_size: int, kv_heads: int, heads: int, head_size: int) -> int:
    """The work items a tile of rows of per_row queries takes (a power of two)."""
    item = block_size * kv_heads * 2 * head_size + per_row * heads * (2 * head_size + block_size)
    items = max(1, TILE_ELEMENTS // item)
    return min(MAX_TILE_ITEMS, 1 << (items.bit_length() - 1))


def row_capacities(tokens: int, max_requests: int) -> tuple[int, int]:
    """The most decode and prefill rows a batch of `tokens` queries has: a decode a
    request, a prefill (two queries or more) its queries / PREFILL_ROW rounded up."""
    requests = min(tokens, max_requests)
    return requests, tokens // PREFILL_ROW + min(tokens // 2, requests)


class RowLayout:
    """A batch's rows, in request order, as the program reads them for a query of
    `tokens` rows (at most max_requests requests): for decode rows (one query) and
    prefill rows (PREFILL_ROW queries) an int32 array [NUM_FIELDS, capacity + 1]
    each (`row_capacities`). A request's queries are the last of its context;
    `starts` are the requests' first tokens (and the end), `seq_lens` their context
    lengths. Rows without queries name token `tokens`, the accumulators' spare."""

    def __init__(
        self,
        starts: np.ndarray,
        seq_lens: np.ndarray,
        block_size: int,
        causal: bool,
        sliding_window: int,
        tokens: int,
        max_requests: int,
    ) -> None:
        queries = np.diff(starts)
        self.arrays = []
        capacities = row_capacities(tokens, max_requests)
        for per_row, capacity in zip((1, PREFILL_ROW), capacities):
            requests = np.flatnonzero((queries == 1) if per_row == 1 else (queries > 1))
            rows = -(-queries[requests] // per_row)
            request = np.repeat(requests, rows)
            if len(request) > capacity:
                raise ValueError(f"{len(request)} attention rows of {per_row} exceed {capacity}")
            place = np.arange(len(request)) - np.repeat(np.cumsum(rows) - rows, rows)
            done = place * per_row
            count = np.minimum(per_row, queries[request] - done)
            position = (seq_lens - queries)[request] + done
            length = seq_lens[request]
            last = (position + count - 1) if causal else (length - 1)
            first = np.zeros_like(position)
            if sliding_window:
                first = np.maximum(0, position - sliding_window + 1)
            first_block, last_block = first // block_size, last // block_size
            items = last_block - first_block + 1
            a = np.zeros((NUM_FIELDS, capacity + 1), dtype=np.int32)
            n = len(request)
            a[REQUEST, :n] = request
            a[FIRST_TOKEN, :] = tokens
            a[FIRST_TOKEN, :n] = starts[request] + done
            a[QUERIES, :n] = count
            a[POSITION, :n] = position
            a[LENGTH, :n] = length
            a[FIRST_BLOCK, :n] = first_block
            a[FIRST_ITEM, :] = items.sum()
            a[FIRST_ITEM, :n] = np.cumsum(items) - items
            self.arrays.append(a)


def _merge_tile(
    i, carry, *, q_all, cache, block_table, rows, per_row, tile, block_size, causal,
    sliding_window, scale, soft_cap,
):  # fmt: skip
    """Merges tile i of the rows' work items into the running (max, sum, output)."""
    m_run, l_run, o_run = carry
    capacity = rows.shape[1] - 1
    spare = q_all.shape[0]  # the accumulators' spare row
    kv_heads, group, head_size = o_run.shape[1], o_run.shape[2], o_run.shape[3]
    k = i * tile + jnp.arange(tile, dtype=jnp.int32)
    row = jnp.searchsorted(rows[FIRST_ITEM], k, side="right").astype(jnp.int32) - 1
    row = jnp.minimum(row, capacity)
    r = rows[:, row]  # each item's row's fields
    j = r[FIRST_BLOCK] + k - r[FIRST_ITEM]
    blocks = block_table[r[REQUEST], jnp.clip(j, 0, block_table.shape[1] - 1)]
    kv = cache[blocks]  # [tile, block_size, kv_heads, 2 * head_size]
    keys, values = kv[..., :head_size], kv[..., head_size:]
    offsets = jnp.arange(per_row, dtype=jnp.int32)
    q_valid = offsets[None, :] < r[QUERIES][:, None]  # [tile, per_row]
    q_tok = jnp.where(q_valid, r[FIRST_TOKEN][:, None] + offsets, 0)
    q_pos = r[POSITION][:, None] + offsets
    q = q_all[q_tok].reshape(tile, per_row, kv_heads, group, head_size)
    scores = (
        jnp.einsum("wqkgd,wskd->wqkgs", q.astype(jnp.float32), keys.astype(jnp.float32)) * scale
    )
    if soft_cap:
        scores = soft_cap * jnp.tanh(scores / soft_cap)
    kv_pos = j[:, None] * block_size + jnp.arange(block_size, dtype=jnp.int32)  # [tile, bs]
    mask = q_valid[:, :, None] & (kv_pos[:, None, :] < r[LENGTH][:, None, None])
    if causal:
        mask &= kv_pos[:, None, :] <= q_pos[:, :, None]
    if sliding_window:
        mask &= kv_pos[:, None, :] > q_pos[:, :, None] - sliding_window
    mask = mask[:, :, None, None, :]
    scores = jnp.where(mask, scores, NEGATIVE)
    m = scores.max(-1)  # [tile, per_row, kv_heads, group]
    p = jnp.where(mask, jnp.exp(scores - m[..., None]), 0.0)
    l_item = p.sum(-1)
    o_item = jnp.einsum("wqkgs,wskd->wqkgd", p, values.astype(jnp.float32))
    # Items of one row are consecutive: a tile's rows are segments (at most `tile`;
    # padding items, of the spare row, take the last, which no row of theirs needs).
    seg = jnp.minimum(row - row[0], tile - 1)
    m_seg = jnp.maximum(jax.ops.segment_max(m, seg, tile, indices_are_sorted=True), NEGATIVE)
    rescale = jnp.exp(m - m_seg[seg])
    l_seg = jax.ops.segment_sum(l_item * rescale, seg, tile, indices_are_sorted=True)
    o_seg = jax.ops.segment_sum(o_item * rescale[..., None], seg, tile, indices_are_sorted=True)
    seg_row = jnp.minimum(row[0] + jnp.arange(tile, dtype=jnp.int32), capacity)
    seg_valid = (offsets[None, :] < rows[QUERIES][seg_row][:, None]) & (
        jnp.arange(tile)[:, None] <= seg[-1]
    )
    tok = jnp.where(seg_valid, rows[FIRST_TOKEN][seg_row][:, None] + offsets, spare)
    m_old, l_old, o_old = m_run[tok], l_run[tok], o_run[tok]
    m_new = jnp.maximum(m_old, m_seg)
    a, b = jnp.exp(m_old - m_new), jnp.exp(m_seg - m_new)
    return (
        m_run.at[tok].set(m_new),
        l_run.at[tok].set(l_old * a + l_seg * b),
        o_run.at[tok].set(o_old * a[..., None] + o_seg * b[..., None]),
    )


def ragged_paged_attention(
    queries: jax.Array,
    cache: jax.Array,
    block_table: jax.Array,
    decode_rows: jax.Array,
    prefill_rows: jax.Array,
    sinks: jax.Array,
    *,
    block_size: int,
    causal: bool,
    sliding_window: int,
    use_sinks: bool,
    scale: float,
    soft_cap: float,
) -> jax.Array:
    """Attention of `queries` [tokens, heads, head_size] over the KV cache `cache`
    [slots, kv_heads, 2 * head_size] (keys, then values) through `block_table`
    [requests, blocks], for the rows of `decode_rows` and `prefill_rows`
    (RowLayout.arrays); [tokens, heads * head_size] in the queries' dtype, zeros for
    tokens of no row. sliding_window 0: none. `sinks` [heads] joins each softmax when
    use_sinks."""
    tokens, heads, head_size = queries.shape
    kv_heads = cache.shape[1]
    group = heads // kv_heads
    cache = cache.reshape(-1, block_size, kv_heads, cache.shape[-1])
    state = (
        jnp.full((tokens + 1, kv_heads, group), NEGATIVE, jnp.float32),
        jnp.zeros((tokens + 1, kv_heads, group), jnp.float32),
        jnp.zeros((tokens + 1, kv_heads, group, head_size), jnp.float32),
    )
    for per_row, rows in ((1, decode_rows), (PREFILL_ROW, prefill_rows)):
        tile = tile_items(per_row, block_size, kv_heads, heads, head_size)
        body = functools.partial(
            _merge_tile, q_all=queries, cache=cache, block_table=block_table, rows=rows,
            per_row=per_row, tile=tile, block_size=block_size, causal=causal,
            sliding_window=sliding_window, scale=scale, soft_cap=soft_cap,
        )  # fmt: skip
        trips = (rows[FIRST_ITEM, -1] + tile - 1) // tile
        state = jax.lax.fori_loop(0, trips, body, state)
    m_run, l_run, o_run = (s[:tokens] for s in state)
    if use_sinks:
        l_run = l_run + jnp.exp(sinks.reshape(kv_heads, group).astype(jnp.float32) - m_run)
    out = jnp.where(l_run[..., None] > 0, o_run / jnp.where(l_run > 0, l_run, 1)[..., None], 0)
    return out.reshape(tokens, heads * head_size).astype(queries.dtype)
