"""Paged attention in torch ops: the KV cache written by slot, and each query
attending to its request's keys and values read through the block table.

A batch's requests are laid out on the host as rows: a decode (one query) a row, a
prefill a row for each PREFILL_ROW of its queries. Rows are grouped by the context
bucket of their own request and cut into chunks of a few row counts, so that each
chunk is one program of a few shapes (compiled at start-up) whose gathered keys and
values and scores stay within CHUNK_ELEMENTS, whatever the batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.worker.gpu_model_runner import NULL_BLOCK_ID

from vllm_torch_tpu.platform import SUPPORTED_DTYPES


def bucket(n: int) -> int:
    """The power of two at least n (at least 1)."""
    return 1 << max(0, n - 1).bit_length()


# The fewest context slots a row is padded to.
MIN_CONTEXT = 64
# The queries of a prefill row.
PREFILL_ROW = 16
# The fewest and the most rows of a chunk.
MIN_CHUNK_ROWS = 8
MAX_CHUNK_ROWS = 256
# The most elements of a chunk's largest intermediates: the keys and values it gathers
# (rows x context x kv_heads * 2 * head_size) and its scores (rows x heads x queries a
# row x context).
CHUNK_ELEMENTS = 1 << 26


def context_buckets(max_model_len: int) -> list[int]:
    """The context lengths rows are padded to: the power of two at least
    max_model_len, and that divided by 4, 16, ... down to MIN_CONTEXT."""
    sizes = [bucket(max_model_len)]
    while sizes[-1] // 4 >= MIN_CONTEXT:
        sizes.append(sizes[-1] // 4)
    return sorted(sizes)


def most_chunk_rows(context: int, per_row: int, slot_elements: int, heads: int) -> int:
    """The rows of a full chunk of rows of per_row queries at this context bucket
    (slot_elements: a slot's keys and values, kv_heads * 2 * head_size)."""
    row = context * max(slot_elements, heads * per_row)
    rows = max(1, CHUNK_ELEMENTS // row)
    return max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, 1 << (rows.bit_length() - 1)))


def chunk_sizes(rows: int, most: int) -> list[int]:
    """The padded row counts of the chunks that hold `rows` rows: full chunks of
    `most`, then the rest's bucket (at least MIN_CHUNK_ROWS)."""
    sizes = [most] * (rows // most)
    if rows % most:
        sizes.append(min(most, max(MIN_CHUNK_ROWS, bucket(rows % most))))
    return sizes


def chunk_shapes(max_model_len: int, slot_elements: int, heads: int) -> list[tuple[int, int, int]]:
    """Every (rows, queries a row, context) a chunk can have."""
    shapes = []
    for context in context_buckets(max_model_len):
        for per_row in (1, PREFILL_ROW):
            most = most_chunk_rows(context, per_row, slot_elements, heads)
            rows = MIN_CHUNK_ROWS
            while rows <= most:
                shapes.append((rows, per_row, context))
                rows *= 2
    return shapes


class TpuAttentionBackend(AttentionBackend):
    # The layer calls do_kv_cache_update before forward.
    forward_includes_kv_cache_update = False
    supported_dtypes: ClassVar[list[torch.dtype]] = SUPPORTED_DTYPES
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # any

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size > 0

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # A layer's cache [blocks, block_size, kv_heads, 2 * head_size] in memory:
        # flattening blocks and block_size gives one row per slot.
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type in (AttentionType.DECODER, AttentionType.ENCODER_ONLY)

    @staticmethod
    def get_impl_cls() -> type[TpuAttentionImpl]:
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TpuAttentionMetadataBuilder]:
        return TpuAttentionMetadataBuilder


@dataclass
class AttentionChunk:
    """Rows of a few queries each over a context bucket, every tensor prepared on the
    host and uploaded whole. A padding query reads token 0 and writes the staging
    buffer's spare row; a padding row attends to the null block's first slot."""

    queries: torch.Tensor  # [rows * queries a row]: each query's token
    outputs: torch.Tensor  # [rows * queries a row]: the row its output goes to
    positions: torch.Tensor  # [rows, queries a row]: each query's position
    lengths: torch.Tensor  # [rows]: the context length of the row's request
    blocks: torch.Tensor  # [rows, context bucket / block size]: its block table

    @staticmethod
    def padding(rows: int, per_row: int, blocks: int, capacity: int) -> dict:
        """A chunk's arrays (numpy, on the host) with every row and query padding."""
        return dict(
            queries=np.zeros((rows, per_row), dtype=np.int64),
            outputs=np.full((rows, per_row), capacity, dtype=np.int64),
            positions=np.zeros((rows, per_row), dtype=np.int64),
            lengths=np.ones(rows, dtype=np.int64),
            blocks=np.full((rows, blocks), NULL_BLOCK_ID, dtype=np.int32),
        )

    @classmethod
    def upload(cls, arrays: dict, device) -> AttentionChunk:
        """The chunk of these arrays, each uploaded whole (queries and outputs flat)."""
        flat = ("queries", "outputs")
        return cls(
            **{
                k: torch.from_numpy(v.reshape(-1) if k in flat else v).to(device)
                for k, v in arrays.items()
            }
        )


@dataclass
class TpuAttentionMetadata:
    num_actual_tokens: int
    chunks: tuple[AttentionChunk, ...]
    causal: bool
    # The staging buffers' rows: the most tokens a batch has.
    capacity: int


class Rows:
    """A batch's rows, in request order: a decode (one query) a row, a prefill a row
    for each PREFILL_ROW of its queries (padding requests, without queries, none)."""

    def __init__(self, starts: np.ndarray, seq_lens: np.ndarray, max_model_len: int) -> None:
        queries = np.diff(starts)
        per_request = np.where(queries == 1, 1, PREFILL_ROW)
        rows = -(-queries // per_request)
        self.request = np.repeat(np.arange(len(queries)), rows)
        # Each row's place among its request's rows.
        place = np.arange(len(self.request)) - np.repeat(np.cumsum(rows) - rows, rows)
        self.per_row = per_request[self.request]
        done = place * self.per_row
        self.first = starts[self.request] + done  # its first query's token
        self.count = np.minimum(self.per_row, queries[self.request] - done)
        # A request's queries are the last of its context.
        self.position = (seq_lens - queries)[self.request] + done  # its first query's
        buckets = np.array(context_buckets(max_model_len))
        self.context = buckets[np.searchsorted(buckets, seq_lens[self.request])]


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.slot_elements = kv_cache_spec.num_kv_heads * 2 * kv_cache_spec.head_size
        model, parallel = vllm_config.model_config, vllm_config.parallel_config
        self.heads = model.get_num_attention_heads(parallel)  # this worker's
        self.max_model_len = vllm_config.model_config.max_model_len
        # The block table on the host, set by the runner (TpuModelRunner).
        self.host_block_table: np.ndarray | None = None
        # The most tokens a batch is padded to (the runner's max_num_tokens).
        self.capacity = vllm_config.scheduler_config.max_num_batched_tokens

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuAttentionMetadata:
        m = common_attn_metadata
        starts = m.query_start_loc_cpu.numpy()[: m.num_reqs + 1].astype(np.int64)
        seq_lens = m.seq_lens_cpu_upper_bound.numpy()[: m.num_reqs].astype(np.int64)
        rows = Rows(starts, seq_lens, self.max_model_len)
        chunks = []
        for per_row, context in sorted(set(zip(rows.per_row.tolist(), rows.context.tolist()))):
            group = np.flatnonzero((rows.per_row == per_row) & (rows.context == context))
            most = most_chunk_rows(context, per_row, self.slot_elements, self.heads)
            for size in chunk_sizes(len(group), most):
                chunk = self._chunk(rows, group[:size], size, per_row, context, seq_lens)
                chunks.append(AttentionChunk.upload(chunk, self.device))
                group = group[size:]
        return TpuAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            chunks=tuple(chunks),
            causal=m.causal is True,
            capacity=self.capacity,
        )

    def _chunk(self, rows: Rows, chosen, size: int, per_row: int, context: int, seq_lens):
        """AttentionChunk's arrays for the rows `chosen`, padded to `size` rows."""
        chunk = AttentionChunk.padding(size, per_row, context // self.block_size, self.capacity)
        n = len(chosen)
        offsets = np.arange(per_row)
        valid = offsets < rows.count[chosen, None]
        tokens = rows.first[chosen, None] + offsets
        chunk["queries"][:n] = np.where(valid, tokens, 0)
        chunk["outputs"][:n] = np.where(valid, tokens, self.capacity)
        chunk["positions"][:n] = np.where(valid, rows.position[chosen, None] + offsets, 0)
        requests = rows.request[chosen]
        chunk["lengths"][:n] = seq_lens[requests]
        width = min(chunk["blocks"].shape[1], self.host_block_table.shape[1])
        chunk["blocks"][:n, :width] = self.host_block_table[requests, :width]
        return chunk


class TpuAttentionImpl(AttentionImpl):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        if alibi_slopes is not None:
            raise NotImplementedError("ALiBi attention is not supported on tpu")
        if kv_cache_dtype != "auto":
            raise NotImplementedError(f"KV cache dtype {kv_cache_dtype} is not supported on tpu")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.logits_soft_cap = logits_soft_cap or 0.0
        self.attn_type = attn_type
        self.sliding_window = sliding_window
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks

    def _slots(self, kv_cache: torch.Tensor) -> torch.Tensor:
        # Logical [blocks, kv_heads, block_size, 2 * head_size] over memory
        # [blocks, block_size, kv_heads, 2 * head_size]: one row per slot.
        blocks, heads, block_size, content = kv_cache.shape
        return kv_cache.transpose(1, 2).reshape(blocks * block_size, heads, content)

    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        if self.kv_sharing_target_layer_name is not None or kv_cache.numel() == 0:
            return
        write_kv_cache(self._slots(kv_cache), key, value, slot_mapping)

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TpuAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # profiling
            return output
        m = attn_metadata
        n = m.num_actual_tokens
        queries, outputs = staging_buffers(
            m.capacity, self.num_heads, self.head_size, query.dtype, query.device
        )
        stage(queries, query[:n].view(n, self.num_heads, self.head_size))
        for chunk in m.chunks:
            self.attend(chunk, queries, outputs, kv_cache, m.causal)
        output[:n].view(n, -1).copy_(outputs[:n])
        return output

    def attend(self, chunk: AttentionChunk, queries, outputs, kv_cache, causal: bool) -> None:
        paged_attention(
            queries,
            outputs,
            self._slots(kv_cache),
            chunk.queries,
            chunk.outputs,
            chunk.positions,
            chunk.lengths,
            chunk.blocks,
            self.sinks,
            block_size=kv_cache.shape[2],
            causal=causal,
            sliding_window=self.sliding_window,
            num_kv_heads=self.num_kv_heads,
            scale=self.scale,
            soft_cap=self.logits_soft_cap,
        )


# The staging buffers by (device, capacity, heads, head_size, dtype): layers run one
# after another, so they share them.
_staging: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def staging_buffers(capacity: int, num_heads: int, head_size: int, dtype, device):
    """A layer's queries [capacity, heads, head_size] and outputs [capacity + 1,
    heads * head_size] (float32; the spare row takes the padding's): chunks read and
    write these, so that their programs do not depend on the batch's token count."""
    key = (device, capacity, num_heads, head_size, dtype)
    if key not in _staging:
        _staging[key] = (
            torch.zeros((capacity, num_heads, head_size), dtype=dtype, device=device),
            torch.zeros((capacity + 1, num_heads * head_size), device=device),
        )
    return _staging[key]


# The staging, the KV cache write and the attention each run as one program a shape
# (torch.compile's "tpu" backend; sizes symbolic after the first new one), not op by
# op, and apart from the model's programs (own_program): those depend on the token
# count alone; fused with these, they would compile again for every chunk shape.
@torch.compile(backend="tpu", fullgraph=True, options={"own_program": True})
def stage(buffer: torch.Tensor, values: torch.Tensor) -> None:
    buffer[: values.shape[0]].copy_(values)


@torch.compile(backend="tpu", fullgraph=True, options={"own_program": True})
def write_kv_cache(
    rows: torch.Tensor, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Stores each token's key and value at its slot of `rows` [slots, kv_heads,
    2 * head_size]; padding tokens (slot -1) write block 0, the KV cache manager's
    null block that no request reads, with what it holds already."""
    n = slot_mapping.shape[0]
    slots = slot_mapping.clamp(min=0)
    new = torch.cat((key[:n], value[:n]), dim=-1).to(rows.dtype)
    new = torch.where((slot_mapping >= 0)[:, None, None], new, rows[slots])
    rows.index_copy_(0, slots, new)


@torch.compile(backend="tpu", fullgraph=True, options={"own_program": True})
def paged_attention(
    queries: torch.Tensor,
    outputs: torch.Tensor,
    rows: torch.Tensor,
    query_tokens: torch.Tensor,
    output_rows: torch.Tensor,
    positions: torch.Tensor,
    lengths: torch.Tensor,
    blocks: torch.Tensor,
    sinks: torch.Tensor | None,
    block_size: int,
    causal: bool,
    sliding_window: int | None,
    num_kv_heads: int,
    scale: float,
    soft_cap: float,
) -> None:
    """Attention of a chunk's queries (rows of `queries` [capacity, heads,
    head_size]) over their contexts in `rows` [slots, kv_heads, 2 * head_size],
    written (float32) to its rows of `outputs`."""
    num_heads, head_size = queries.shape[1:]
    num_rows, per_row = positions.shape
    j = torch.arange(blocks.shape[1] * block_size, device=queries.device)
    context_slots = blocks.to(torch.int64)[:, j // block_size] * block_size + j % block_size
    context = rows[context_slots]  # [rows, context, kv_heads, 2 * head_size]
    k, v = context.split(head_size, dim=-1)
    group = num_heads // num_kv_heads
    if group > 1:
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    q = queries[query_tokens].view(num_rows, per_row, num_heads, head_size)
    # [rows, heads, queries, context] in float32.
    scores = torch.einsum("rqhd,rchd->rhqc", q.float(), k.float()) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    mask = j[None, None, :] < lengths[:, None, None]
    if causal:
        mask = mask & (j[None, None, :] <= positions[:, :, None])
    if sliding_window is not None:
        mask = mask & (j[None, None, :] > positions[:, :, None] - sliding_window)
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    if sinks is not None:
        sink = sinks.float()[None, :, None, None].expand(num_rows, -1, per_row, 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("rhqc,rchd->rqhd", probs, v.float())
    outputs.index_copy_(0, output_rows, out.reshape(num_rows * per_row, num_heads * head_size))
