"""vLLM's GPU model runner on the tpu device: the same batching, scheduling and
sampling, with the one CUDA-only piece (the Triton kernel that maps tokens to KV
cache slots) written in torch ops, and batches padded to a few sizes (powers of two)
so that the model's programs, compiled at start-up, serve every batch."""

from __future__ import annotations

import contextlib
import dataclasses
import types

import torch
import torch_tpu
from vllm.logger import init_logger
from vllm.v1.worker.block_table import BlockTable
from vllm.v1.worker import gpu_model_runner
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import allocate_kv_cache

from vllm_torch_tpu import moe  # noqa: F401  (registers the experts and routing ops)
from vllm_torch_tpu.attention import bucket, request_of_tokens

logger = init_logger(__name__)

# vLLM's slot for a token whose key and value are not stored (padding).
PAD_SLOT_ID = -1
# The fewest tokens a batch is padded to.
MIN_PADDED_TOKENS = 16


def compute_slot_mapping(
    self: BlockTable, num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor
) -> None:
    """BlockTable.compute_slot_mapping, whose Triton kernel this replaces."""
    write_slot_mapping(
        self.slot_mapping.gpu, self.block_table.gpu, query_start_loc, positions, num_reqs,
        self.block_size,
    )  # fmt: skip


@torch.compile(backend="tpu", fullgraph=True, options={"own_program": True})
def write_slot_mapping(
    slots: torch.Tensor,
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    num_reqs: int,
    block_size: int,
) -> None:
    """Each scheduled token's KV cache slot: its request's block at its position, the
    rest of the buffer `slots` padding. One program a shape, not op by op."""
    num_tokens = positions.shape[0]
    request = request_of_tokens(query_start_loc, num_reqs, num_tokens)
    block = block_table[request, positions // block_size].to(torch.int64)
    slots[:num_tokens] = block * block_size + positions % block_size
    slots[num_tokens:].fill_(PAD_SLOT_ID)


def allocate_kv_cache_per_layer(kv_cache_config, device, layout, kernel_block_sizes=None):
    """vLLM's KV cache views, each layer in a tensor of its own dtype.

    vLLM places every layer in one int8 allocation and views it by dtype; a tpu
    program that reads such a view reads the whole allocation (gigabytes, each
    op). The layers' shapes and memory orders are vLLM's, laid out on the meta
    device."""
    views = allocate_kv_cache(kv_cache_config, torch.device("meta"), layout, kernel_block_sizes)
    own: dict[int, torch.Tensor] = {}  # layers that shared a view still share one
    caches = {}
    for name, view in views.items():
        if id(view) not in own:
            order = sorted(range(view.dim()), key=lambda d: -view.stride(d))
            stored = torch.zeros([view.shape[d] for d in order], dtype=view.dtype, device=device)
            own[id(view)] = stored.permute([order.index(d) for d in range(view.dim())])
        caches[name] = own[id(view)]
    return caches


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device: torch.device):
        super().__init__(vllm_config, device)
        self._map_slots_in_torch()

    def _map_slots_in_torch(self) -> None:
        for table in self.input_batch.block_table.block_tables:
            table.compute_slot_mapping = types.MethodType(compute_slot_mapping, table)

    def may_reinitialize_input_batch(self, *args, **kwargs):
        super().may_reinitialize_input_batch(*args, **kwargs)
        self._map_slots_in_torch()

    def _padded_tokens(self, num_tokens: int) -> int:
        return min(bucket(max(num_tokens, MIN_PADDED_TOKENS)), self.max_num_tokens)

    def _padded_reqs(self, num_reqs: int) -> int:
        return min(bucket(num_reqs), self.max_num_reqs)

    def _determine_batch_execution_and_padding(self, num_tokens: int, num_reqs: int, *a, **kw):
        mode, batch, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *a, **kw
        )
        # The runner pads the model's inputs and the KV slot mapping to these (the
        # padding's slots are -1); _build_attention_metadata pads the attention's.
        batch = dataclasses.replace(
            batch,
            num_tokens=self._padded_tokens(batch.num_tokens),
            num_reqs=self._padded_reqs(batch.num_reqs or num_reqs),
        )
        return (mode, batch, *rest)

    def _build_attention_metadata(self, *args, **kwargs):
        # vLLM pads the attention's batch only for full CUDA graphs; padding
        # requests have no query and no context.
        kwargs["num_tokens_padded"] = kwargs.get("num_tokens_padded") or self._padded_tokens(
            kwargs["num_tokens"]
        )
        kwargs["num_reqs_padded"] = kwargs.get("num_reqs_padded") or self._padded_reqs(
            kwargs["num_reqs"]
        )
        return super()._build_attention_metadata(*args, **kwargs)

    # vLLM's input preparation and sampling: a few dozen small ops at the batch's own
    # sizes, recorded and run as one program each (DeferAndFuse) rather than one
    # program an op.
    def _prepare_inputs(self, *args, **kwargs):
        with torch_tpu.eager_mode("defer_and_fuse"):
            return super()._prepare_inputs(*args, **kwargs)

    def _sample(self, *args, **kwargs):
        with torch_tpu.eager_mode("defer_and_fuse"):
            return super()._sample(*args, **kwargs)

    def initialize_kv_cache_tensors(self, *args, **kwargs):
        with _replaced(gpu_model_runner, "allocate_kv_cache", allocate_kv_cache_per_layer):
            return super().initialize_kv_cache_tensors(*args, **kwargs)

    def token_buckets(self) -> list[int]:
        """The token counts batches are padded to."""
        sizes, n = [], MIN_PADDED_TOKENS
        while n < self.max_num_tokens:
            sizes.append(n)
            n *= 2
        return sizes + [self.max_num_tokens]

    def warm_up(self) -> None:
        """Runs the model at every token count batches are padded to, and the sampler
        once, so that serving starts with their programs compiled."""
        for num_tokens in self.token_buckets():
            self._dummy_run(num_tokens=num_tokens, skip_eplb=True)
        max_num_reqs = min(self.max_num_reqs, self.max_num_tokens)
        _, last_hidden_states = self._dummy_run(num_tokens=max_num_reqs, skip_eplb=True)
        self._dummy_sampler_run(hidden_states=last_hidden_states)
        torch.tpu.synchronize(self.device)

    def _sync_device(self) -> None:
        torch.tpu.synchronize(self.device)


@contextlib.contextmanager
def _replaced(module, name: str, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)
