"""vLLM's GPU model runner on the tpu device: the same batching, scheduling and
sampling, with the one CUDA-only piece (the Triton kernel that maps tokens to KV
cache slots) written in torch ops."""

from __future__ import annotations

import contextlib
import types

import torch
from vllm.logger import init_logger
from vllm.v1.worker.block_table import BlockTable
from vllm.v1.worker import gpu_model_runner
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.utils import allocate_kv_cache

from vllm_torch_tpu import moe  # noqa: F401  (registers the experts and routing ops)
from vllm_torch_tpu.attention import request_of_tokens

logger = init_logger(__name__)

# vLLM's slot for a token whose key and value are not stored (padding).
PAD_SLOT_ID = -1


def compute_slot_mapping(
    self: BlockTable, num_reqs: int, query_start_loc: torch.Tensor, positions: torch.Tensor
) -> None:
    """Each scheduled token's KV cache slot: its request's block at its position, the
    rest of the buffer padding (BlockTable.compute_slot_mapping's Triton kernel)."""
    num_tokens = positions.shape[0]
    slots = self.slot_mapping.gpu
    if num_tokens:
        request = request_of_tokens(query_start_loc, num_reqs, num_tokens)
        block = self.block_table.gpu[request, positions // self.block_size].to(torch.int64)
        slots[:num_tokens] = block * self.block_size + positions % self.block_size
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

    def initialize_kv_cache_tensors(self, *args, **kwargs):
        with _replaced(gpu_model_runner, "allocate_kv_cache", allocate_kv_cache_per_layer):
            return super().initialize_kv_cache_tensors(*args, **kwargs)

    def warm_up(self) -> None:
        """Runs the largest batch and the sampler once, so that serving starts with
        their programs compiled."""
        max_num_reqs = min(
            self.scheduler_config.max_num_seqs, self.scheduler_config.max_num_batched_tokens
        )
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
