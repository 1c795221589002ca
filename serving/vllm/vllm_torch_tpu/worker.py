"""A vLLM worker on one tpu device: vLLM's GPU worker with the device, its
memory and the model runner taken from torch_tpu."""

from __future__ import annotations

import contextlib
import os

import torch
import torch_tpu
from vllm.logger import init_logger
from vllm.utils.mem_utils import format_gib
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes
from vllm.v1.worker.workspace import init_workspace_manager

from vllm_torch_tpu.model_runner import TpuModelRunner

logger = init_logger(__name__)


def select_device(local_rank: int, world_size: int) -> torch.device:
    """The device of a worker at `local_rank`, in torch_tpu's convention: one process
    per device, each seeing its device as tpu:0, chosen by LOCAL_RANK when the device
    starts (vLLM's multiprocessing executor gives workers their rank as an argument,
    not in the environment; they would all take host device 0 on the CPU platform)."""
    if world_size > 1:
        started = torch_tpu._C._is_started()
        if started and os.environ.get("LOCAL_RANK", "0") != str(local_rank):
            raise RuntimeError(
                f"the tpu device of this worker (local rank {local_rank}) started before "
                f"the worker, with LOCAL_RANK={os.environ.get('LOCAL_RANK')}"
            )
        os.environ["LOCAL_RANK"] = str(local_rank)
    return torch.device("tpu", 0)


class TpuWorker(Worker):
    def init_device(self) -> None:
        from vllm.platforms import current_platform

        self.device = select_device(self.local_rank, self.parallel_config.world_size)
        torch.tpu.set_device(self.device)
        # The runner pads batches to a few sizes itself: torch_tpu's automatic bounds
        # (for sequences grown by cat) would only pad further and run ops that meet
        # the runner's static tensors once per size.
        torch_tpu._C._set_automatic_bounds(False)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        init_workspace_manager(self.device, 1, 1)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def determine_available_memory(self) -> int:
        """The KV cache's bytes: as configured, or what the device has free after a
        profile run at the largest batch, within `gpu_memory_utilization`."""
        self.model_runner.profile_run()
        torch.tpu.synchronize(self.device)
        if self.cache_config.kv_cache_memory_bytes is not None:
            return self.cache_config.kv_cache_memory_bytes
        free, total = torch.tpu.mem_get_info(self.device)
        used = total - free
        budget = int(total * self.cache_config.gpu_memory_utilization) - used
        if budget <= 0:
            raise ValueError(
                f"no device memory is left for the KV cache: {format_gib(used)} GiB of "
                f"{format_gib(total)} GiB in use, gpu_memory_utilization="
                f"{self.cache_config.gpu_memory_utilization}"
            )
        logger.info("KV cache: %s GiB of the tpu device", format_gib(budget))
        return budget

    def compile_or_warm_up_model(self) -> CompilationTimes:
        self.model_runner.warm_up()
        set_random_seed(self.model_config.seed)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )

    def tpu_metrics(self) -> dict:
        """torch_tpu's counters in this worker's process (`torch_tpu.metrics()`), for
        `LLM.collective_rpc("tpu_metrics")`: one dict a worker."""
        return torch_tpu.metrics()

    def _maybe_get_memory_pool_context(self, tag: str):
        # No pooled allocator for sleep mode: tensors come from torch_tpu's.
        return contextlib.nullcontext()

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")

    def wake_up(self, tags: list[str] | None = None) -> None:
        logger.warning("sleep mode is not supported on tpu; ignored")
