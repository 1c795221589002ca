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


def request_of_tokens(
    query_start_loc: torch.Tensor, num_reqs: int, num_tokens: int
) -> torch.Tensor:
    """The request each of the batch's first num_tokens tokens belongs to."""
    token = torch.arange(num_tokens, device=query_start_loc.device)
    return torch.searchsorted(query_start_loc[1 : num_reqs + 1], token, right=True)


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
    max_query: int
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

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuAttentionMetadata:
        m = common_attn_metadata
        device = m.query_start_loc.device
        num_reqs, num_tokens = m.num_reqs, m.num_actual_tokens
        # Padded to powers of two, so that a batch's programs serve the steps
        # after it until a request outgrows them.
        max_query, max_context = bucket(m.max_query_len), bucket(m.max_seq_len)
        query_start_loc = m.query_start_loc[: num_reqs + 1].to(torch.int64)
        starts = query_start_loc[:-1]
        query_lens = query_start_loc[1:] - starts
        seq_lens = m.seq_lens[:num_reqs].to(torch.int64)

        i = torch.arange(max_query, device=device)
        token_valid = i[None, :] < query_lens[:, None]
        token_rows = torch.where(token_valid, starts[:, None] + i[None, :], 0).reshape(-1)
        # A request's queries are the last of its context: query i at position
        # seq_len - query_len + i.
        query_pos = (seq_lens - query_lens)[:, None] + i[None, :]

        j = torch.arange(max_context, device=device)
        blocks = m.block_table_tensor[:num_reqs].to(torch.int64)
        block_of_j = (j // self.block_size).clamp(max=blocks.shape[1] - 1)
        context_slots = blocks[:, block_of_j] * self.block_size + j % self.block_size

        mask = j[None, None, :] < seq_lens[:, None, None]
        if m.causal is True:
            mask = mask & (j[None, None, :] <= query_pos[:, :, None])
        if self.sliding_window is not None:
            mask = mask & (j[None, None, :] > query_pos[:, :, None] - self.sliding_window)

        request = request_of_tokens(query_start_loc, num_reqs, num_tokens)
        t = torch.arange(num_tokens, device=device)
        row_of_token = request * max_query + (t - starts[request])
        return TpuAttentionMetadata(
            num_actual_tokens=num_tokens,
            max_query=max_query,
            token_rows=token_rows,
            context_slots=context_slots,
            mask=mask[:, None],
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
        n = slot_mapping.shape[0]
        rows = self._slots(kv_cache)
        # Padding tokens (slot -1) write block 0, the KV cache manager's null
        # block that no request reads, with what it holds already.
        slots = slot_mapping.clamp(min=0)
        new = torch.cat((key[:n], value[:n]), dim=-1).to(rows.dtype)
        new = torch.where((slot_mapping >= 0)[:, None, None], new, rows[slots])
        rows.index_copy_(0, slots, new)

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
        num_reqs, max_query = m.context_slots.shape[0], m.max_query
        rows = self._slots(kv_cache)
        context = rows[m.context_slots]  # [requests, context, kv_heads, 2 * head_size]
        k, v = context.split(self.head_size, dim=-1)
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        q = query[:n].view(n, self.num_heads, self.head_size)[m.token_rows]
        q = q.view(num_reqs, max_query, self.num_heads, self.head_size)
        # [requests, heads, queries, context] in float32.
        scores = torch.einsum("rqhd,rchd->rhqc", q.float(), k.float()) * self.scale
        if self.logits_soft_cap:
            scores = self.logits_soft_cap * torch.tanh(scores / self.logits_soft_cap)
        scores = scores.masked_fill(~m.mask, float("-inf"))
        if self.sinks is not None:
            sink = self.sinks.float()[None, :, None, None].expand(num_reqs, -1, max_query, 1)
            probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("rhqc,rchd->rqhd", probs, v.float())
        out = out.reshape(num_reqs * max_query, self.num_heads * self.head_size)[m.row_of_token]
        output[:n].view(n, -1).copy_(out.to(output.dtype))
        return output
