"""The paged attention of a ragged batch (decodes and prefills of different context
lengths, one program looping over the batch's tiles of work) against attention
computed request by request, in float64 on the CPU. Each check runs in a process of
its own: a process that holds the tpu device keeps it, and the other tests' engines
need it."""

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
from vllm_torch_tpu import attention, ragged_attention

BLOCK, HEADS, KV_HEADS, HEAD = 16, 4, 2, 8
MAX_MODEL_LEN, MAX_REQUESTS = 256, 64
# (queries, sequence length) a request: decodes of short and long contexts, a
# one-token prompt, prefills of one and of several rows, a prefill chunk at the end of
# a long context, a whole prompt of 16 rows, and decodes enough for several tiles.
REQUESTS = [(1, 5), (1, 70), (1, 200), (7, 7), (40, 100), (1, 1), (20, 255), (2, 66)]
REQUESTS += [(1, k) for k in range(3, 40, 3)] + [(255, 255)] + [(1, 250)] * 8


def reference(q, memory, blocks, query_len, seq_len, window, scale, causal, soft_cap, sinks):
    """Attention of one request's queries (the last of its context), float64."""
    slots = np.array([blocks[p // BLOCK] * BLOCK + p % BLOCK for p in range(seq_len)])
    kv = memory.reshape(-1, KV_HEADS, 2 * HEAD)[slots].double()
    k, v = kv.split(HEAD, dim=-1)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double().view(query_len, HEADS, HEAD), k) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    position = torch.arange(seq_len - query_len, seq_len)[:, None]
    key = torch.arange(seq_len)[None, :]
    allowed = key <= position if causal else torch.ones(query_len, seq_len, dtype=torch.bool)
    if window is not None:
        allowed &= key > position - window
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        sink = sinks.double()[:, None, None].expand(HEADS, query_len, 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", probs, v)
    return out.reshape(query_len, HEADS * HEAD)


# (sliding window, tile items, causal, soft cap and sinks): tiles of 8 items split
# rows of many blocks between tiles.
CASES = [(None, None, True, False), (24, 8, True, False), (None, 8, True, True)]
CASES += [(None, None, False, False)]


@pytest.mark.parametrize("window,tile,causal,extras", CASES)
def test_ragged_batch_equals_attention_request_by_request(window, tile, causal, extras):
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_attention; "
    code += f"test_attention.check_ragged_batch({window!r}, {tile!r}, {causal!r}, {extras!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def check_ragged_batch(window, tile, causal, extras):
    if tile:
        ragged_attention.MAX_TILE_ITEMS = tile
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    per_request = -(-MAX_MODEL_LEN // BLOCK)
    num_blocks = 1 + per_request * len(REQUESTS)
    memory = torch.randn(num_blocks, BLOCK, KV_HEADS, 2 * HEAD)
    # Each request's blocks, shuffled; block 0 is the null block. Two padding requests.
    order = rng.permutation(np.arange(1, num_blocks))
    table = np.zeros((len(REQUESTS) + 2, per_request), dtype=np.int32)
    table[: len(REQUESTS)] = order.reshape(len(REQUESTS), per_request)
    query_lens = [q for q, _ in REQUESTS] + [0, 0]
    seq_lens = [s for _, s in REQUESTS] + [0, 0]
    starts = np.concatenate([[0], np.cumsum(query_lens)])
    tokens = int(starts[-1])
    padded = 1 << (tokens - 1).bit_length()
    query = torch.randn(padded, HEADS * HEAD)

    config = types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(max_num_seqs=MAX_REQUESTS)
    )
    spec = types.SimpleNamespace(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD)
    builder = attention.TpuAttentionMetadataBuilder(spec, [], config, torch.device("tpu"))
    builder.host_block_table = table
    metadata = builder.build(
        0,
        types.SimpleNamespace(
            query_start_loc_cpu=torch.from_numpy(starts),
            seq_lens_cpu_upper_bound=torch.tensor(seq_lens),
            num_reqs=len(query_lens),
            num_actual_tokens=padded,
            causal=causal,
        ),
    )

    scale = HEAD**-0.5
    soft_cap = 3.0 if extras else None
    sinks = torch.randn(HEADS) if extras else None
    impl = attention.TpuAttentionImpl(
        HEADS, HEAD, scale, num_kv_heads=KV_HEADS, sliding_window=window,
        logits_soft_cap=soft_cap, sinks=None if sinks is None else sinks.to("tpu"),
    )  # fmt: skip
    # The cache as vLLM views it: [blocks, kv_heads, block_size, 2 * head_size].
    kv_cache = memory.to("tpu").permute(0, 2, 1, 3)
    output = torch.zeros(padded, HEADS * HEAD, device="tpu")
    impl.forward(None, query.to("tpu"), None, None, kv_cache, metadata, output)
    got = output.cpu()[:tokens]

    expected = torch.cat(
        [
            reference(
                query[starts[r] : starts[r + 1]],
                memory,
                table[r],
                q,
                s,
                window,
                scale,
                causal,
                soft_cap,
                sinks,
            )
            for r, (q, s) in enumerate(REQUESTS)
        ]
    )
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_work_follows_the_blocks_attended():
    """A row's work items are the KV blocks its queries can see: a long decode's whole
    context, a windowed one's last blocks, a prefill row's blocks up to its last query."""
    starts = np.array([0, 1, 2, 34])  # a decode, a decode, a 32-token prompt
    seq_lens = np.array([4000, 4000, 32])

    def items(rows):
        return np.diff(rows[ragged_attention.FIRST_ITEM])

    def layout(window):
        rows = ragged_attention.RowLayout(starts, seq_lens, BLOCK, True, window, 64, 4)
        return rows.arrays

    decode, prefill = layout(0)
    assert items(decode)[:2].tolist() == [250, 250]  # ceil(4000 / 16)
    assert items(prefill)[:2].tolist() == [1, 2]  # queries 0-15 see block 0; 16-31 blocks 0-1
    decode, prefill = layout(24)
    assert items(decode)[:2].tolist() == [2, 2]  # positions 3976-3999: blocks 248 and 249
    assert decode[ragged_attention.FIRST_BLOCK, :2].tolist() == [248, 248]
