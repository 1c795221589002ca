"""Paged attention in torch ops: the KV cache written by slot, and each token
attending to its request's keys and values read through the block table, the
whole ragged batch at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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

from vllm_torch_tpu.platform import SUPPORTED_DTYPES


def bucket(n: int) -> int:
    """The power of two at least n (at least 1)."""
    return 1 << max(0, n - 1).bit_length()


# A batch of at most this many requests is padded to this many (or its token
# bucket, if fewer); a larger one to its token bucket.
FEW_REQUESTS = 16
# The fewest context slots a request is padded to.
MIN_CONTEXT = 64


def context_buckets(max_model_len: int) -> list[int]:
    """The context lengths the attention pads requests to: the power of two at least
    max_model_len, and that divided by 4, 16, ... down to MIN_CONTEXT."""
    sizes = [bucket(max_model_len)]
    while sizes[-1] // 4 >= MIN_CONTEXT:
        sizes.append(sizes[-1] // 4)
    return sorted(sizes)


def attention_shape(
    num_tokens_padded: int, max_query: int, max_seq: int, max_model_len: int
) -> tuple[int, int]:
    """The queries and context slots each request of a batch is padded to: one
    query if every request has one (decode), else as many as the token bucket (at
    most max_model_len's bucket); the context bucket holding max_seq and the
    queries. Few sizes, so that warm-up compiles them all."""
    longest = bucket(max_model_len)
    queries = 1 if max_query == 1 else min(num_tokens_padded, longest)
    context = next(c for c in context_buckets(max_model_len) if c >= max(max_seq, queries))
    return queries, context


def request_of_tokens(
    query_start_loc: torch.Tensor, num_reqs: int, num_tokens: int
) -> torch.Tensor:
    """The request each of the batch's first num_tokens tokens belongs to (padding
    tokens past the last request's: the last request)."""
    token = torch.arange(num_tokens, device=query_start_loc.device)
    request = torch.searchsorted(query_start_loc[1 : num_reqs + 1], token, right=True)
    return request.clamp(max=num_reqs - 1)


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
class TpuAttentionMetadata:
    num_actual_tokens: int
    # The batch as requests padded to max_query queries: for row r, query i,
    token_rows: torch.Tensor  # [requests * max_query]: the token there (0 where none)
    context_slots: torch.Tensor  # [requests, max_context]: the slots of its context
    # [requests, 1, max_query, max_context]: what each query attends to.
    mask: torch.Tensor
    # token t sits at row_of_token[t] of the padded [requests * max_query] batch
    row_of_token: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.sliding_window = getattr(kv_cache_spec, "sliding_window", None)
        self.max_model_len = vllm_config.model_config.max_model_len

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuAttentionMetadata:
        m = common_attn_metadata
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        # The runner pads requests and tokens (num_reqs and num_tokens are padded);
        # queries and context are padded here (attention_shape).
        max_query, max_context = attention_shape(
            num_tokens, m.max_query_len, m.max_seq_len, self.max_model_len
        )
        token_rows, context_slots, mask, row_of_token = batch_layout(
            m.query_start_loc[: num_reqs + 1],
            m.seq_lens[:num_reqs],
            m.block_table_tensor[:num_reqs],
            num_tokens,
            max_query,
            max_context,
            self.block_size,
            m.causal is True,
            self.sliding_window,
        )
        return TpuAttentionMetadata(
            num_actual_tokens=num_tokens,
            token_rows=token_rows,
            context_slots=context_slots,
            mask=mask,
            row_of_token=row_of_token,
        )


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
        out = paged_attention(
            query[:n].view(n, self.num_heads, self.head_size),
            self._slots(kv_cache),
            m.context_slots,
            m.token_rows,
            m.mask,
            m.row_of_token,
            self.sinks,
            num_kv_heads=self.num_kv_heads,
            scale=self.scale,
            soft_cap=self.logits_soft_cap,
        )
        output[:n].view(n, -1).copy_(out.to(output.dtype))
        return output


# The batch's layout, the KV cache write and the attention each run as one program a
# shape (torch.compile's "tpu" backend; sizes symbolic after the first new one), not
# op by op, and apart from the model's programs (own_program): those depend on the
# token count alone and are compiled at warm-up; fused with these, they would compile
# again for every combination of request, query and context buckets.
@torch.compile(backend="tpu", fullgraph=True, options={"own_program": True})
def batch_layout(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    num_tokens: int,
    max_query: int,
    max_context: int,
    block_size: int,
    causal: bool,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """TpuAttentionMetadata's tensors for a batch of requests (query_start_loc [R + 1],
    seq_lens [R], block_table [R, blocks]) padded to max_query queries and
    max_context context slots each."""
    device = query_start_loc.device
    query_start_loc = query_start_loc.to(torch.int64)
    starts = query_start_loc[:-1]
    query_lens = query_start_loc[1:] - starts
    seq_lens = seq_lens.to(torch.int64)

    i = torch.arange(max_query, device=device)
    token_valid = i[None, :] < query_lens[:, None]
    token_rows = torch.where(token_valid, starts[:, None] + i[None, :], 0).reshape(-1)
    # A request's queries are the last of its context: query i at position
    # seq_len - query_len + i.
    query_pos = (seq_lens - query_lens)[:, None] + i[None, :]

    j = torch.arange(max_context, device=device)
    blocks = block_table.to(torch.int64)
    block_of_j = (j // block_size).clamp(max=blocks.shape[1] - 1)
    context_slots = blocks[:, block_of_j] * block_size + j % block_size

    # Padding requests (no context) attend to slot 0 of the null block, so that
    # their rows, which nothing reads, stay finite.
    mask = j[None, None, :] < seq_lens.clamp(min=1)[:, None, None]
    if causal:
        mask = mask & (j[None, None, :] <= query_pos[:, :, None])
    if sliding_window is not None:
        mask = mask & (j[None, None, :] > query_pos[:, :, None] - sliding_window)

    # Padding tokens (past the batch's last query) read row 0.
    num_reqs = starts.shape[0]
    request = request_of_tokens(query_start_loc, num_reqs, num_tokens)
    t = torch.arange(num_tokens, device=device)
    row_of_token = torch.where(
        t < query_start_loc[-1], request * max_query + (t - starts[request]), 0
    )
    return token_rows, context_slots, mask[:, None], row_of_token


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
    query: torch.Tensor,
    rows: torch.Tensor,
    context_slots: torch.Tensor,
    token_rows: torch.Tensor,
    mask: torch.Tensor,
    row_of_token: torch.Tensor,
    sinks: torch.Tensor | None,
    num_kv_heads: int,
    scale: float,
    soft_cap: float,
) -> torch.Tensor:
    """Attention of the tokens `query` [n, heads, head_size] over their requests'
    contexts in `rows`, as TpuAttentionMetadata lays them out; [n, heads * head_size]
    in float32."""
    num_heads, head_size = query.shape[1:]
    num_reqs = context_slots.shape[0]
    max_query = token_rows.shape[0] // num_reqs
    context = rows[context_slots]  # [requests, context, kv_heads, 2 * head_size]
    k, v = context.split(head_size, dim=-1)
    group = num_heads // num_kv_heads
    if group > 1:
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    q = query[token_rows].view(num_reqs, max_query, num_heads, head_size)
    # [requests, heads, queries, context] in float32.
    scores = torch.einsum("rqhd,rchd->rhqc", q.float(), k.float()) * scale
    if soft_cap:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        sink = sinks.float()[None, :, None, None].expand(num_reqs, -1, max_query, 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("rhqc,rchd->rqhd", probs, v.float())
    return out.reshape(num_reqs * max_query, num_heads * head_size)[row_of_token]
