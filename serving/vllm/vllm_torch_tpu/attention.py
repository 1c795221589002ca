"""Paged attention on tpu: the KV cache written by slot, and a batch's queries
attending to their requests' keys and values through the block table in one
program a token bucket (ragged_attention: a loop on the device over the batch's
work), whatever the batch's lengths."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch_tpu.kernels import jax_op
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
from vllm_torch_tpu.ragged_attention import RowLayout, ragged_paged_attention


def bucket(n: int) -> int:
    """The power of two at least n (at least 1)."""
    return 1 << max(0, n - 1).bit_length()


ragged_attention_op = jax_op(
    "vllm_torch_tpu::ragged_paged_attention",
    ragged_paged_attention,
    static_argnames=("block_size", "causal", "sliding_window", "use_sinks", "scale", "soft_cap"),
    vjp=False,
)


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
    """A batch laid out on the host (query starts, context lengths, block table): the
    block table uploaded once a step, the rows once for each window the model's
    layers have."""

    num_actual_tokens: int
    causal: bool
    starts: np.ndarray
    seq_lens: np.ndarray
    host_block_table: np.ndarray
    block_size: int
    max_reqs: int
    device: torch.device
    uploaded: dict = field(default_factory=dict)

    def rows(self, sliding_window: int, tokens: int) -> tuple[torch.Tensor, ...]:
        """The block table and the decode and prefill rows (RowLayout) for a layer of
        this window (0: none) and a query of `tokens` rows, on the device."""
        if tokens not in self.uploaded:
            reqs = min(tokens, self.max_reqs)
            table = np.zeros((reqs, self.host_block_table.shape[1]), dtype=np.int32)
            table[: len(self.seq_lens)] = self.host_block_table[: len(self.seq_lens)]
            self.uploaded[tokens] = torch.from_numpy(table).to(self.device)
        key = (sliding_window, tokens)
        if key not in self.uploaded:
            layout = RowLayout(
                self.starts, self.seq_lens, self.block_size, self.causal,
                sliding_window, tokens, self.max_reqs,
            )  # fmt: skip
            self.uploaded[key] = tuple(torch.from_numpy(a).to(self.device) for a in layout.arrays)
        return (self.uploaded[tokens], *self.uploaded[key])


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        self.max_reqs = vllm_config.scheduler_config.max_num_seqs
        # The block table on the host, set by the runner (TpuModelRunner).
        self.host_block_table: np.ndarray | None = None

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> TpuAttentionMetadata:
        m = common_attn_metadata
        # Padding requests (no queries) have no rows.
        starts = m.query_start_loc_cpu.numpy()[: m.num_reqs + 1].astype(np.int64)
        seq_lens = m.seq_lens_cpu_upper_bound.numpy()[: m.num_reqs].astype(np.int64)
        return TpuAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            causal=m.causal is True,
            starts=starts,
            seq_lens=seq_lens,
            host_block_table=self.host_block_table,
            block_size=self.block_size,
            max_reqs=self.max_reqs,
            device=self.device,
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
        self.window = sliding_window or 0  # 0: none
        self._no_sinks: torch.Tensor | None = None

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
        tokens = query.shape[0]
        table, decode_rows, prefill_rows = attn_metadata.rows(self.window, tokens)
        out = ragged_attention_op(
            query.view(tokens, self.num_heads, self.head_size),
            self._slots(kv_cache),
            table,
            decode_rows,
            prefill_rows,
            self._sinks(query.device),
            block_size=kv_cache.shape[2],
            causal=attn_metadata.causal,
            sliding_window=self.window,
            use_sinks=self.sinks is not None,
            scale=self.scale,
            soft_cap=self.logits_soft_cap,
        )
        output.view(out.shape).copy_(out)
        return output

    def _sinks(self, device) -> torch.Tensor:
        """The sinks [heads], or zeros the program ignores when the layer has none."""
        if self.sinks is not None:
            return self.sinks
        if self._no_sinks is None:
            self._no_sinks = torch.zeros(self.num_heads, device=device)
        return self._no_sinks


# The KV cache write runs as one program a token bucket (torch.compile's "tpu"
# backend), not op by op, and apart from the model's programs (own_program).
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
