"""The tpu device as vLLM sees it: what it supports and which worker, runner and
attention backend serve on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from typing import TYPE_CHECKING

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = init_logger(__name__)

# The KV cache on the CPU platform, whose "device memory" is the host's: a
# modest default, as vLLM's CPU backend takes (VLLM_CPU_KVCACHE_SPACE), rather
# than a fraction of all the machine's memory.
CPU_PLATFORM_KV_CACHE_BYTES = 4 << 30

# The dtypes models are served in on tpu.
SUPPORTED_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "tpu"
    device_type = "tpu"
    dispatch_key = "PrivateUse1"
    # torch.distributed's backend for tpu tensors (torch_tpu.distributed).
    dist_backend = "tpu_dist"
    ray_device_key = "TPU"
    # vLLM's small compiled helpers (torch.compile(backend=simple_compile_backend)).
    simple_compile_backend = "tpu_or_eager"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return SUPPORTED_DTYPES

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return device_facts(device_id)["name"]

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        return None

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return device_facts(device_id)["total_memory"]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.inference_mode()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        # vLLM lets a platform without a list serve every method; its quantized
        # layers run CUDA kernels, so a quantized model would fail in its first forward.
        raise ValueError(
            f"quantized weights ({quant}) are not supported on tpu: serve the model's "
            "unquantized checkpoint"
        )

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"the tpu platform does not serve models in {dtype}")

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM's CUDA/CPU kernels (vllm._C) are not built for this platform:
        # models run their plain-PyTorch forward_native.
        pass

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum,
        attn_selector_config: AttentionSelectorConfig,
        num_heads: int | None = None,
    ) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("MLA and sparse attention are not supported on tpu")
        if selected_backend is not None and selected_backend.name != "CUSTOM":
            logger.info("Attention backend %s is not available on tpu.", selected_backend.name)
        return "vllm_torch_tpu.attention.TpuAttentionBackend"

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = 16
        if cache_config.kv_cache_memory_bytes is None and _is_cpu_platform():
            cache_config.kv_cache_memory_bytes = CPU_PLATFORM_KV_CACHE_BYTES

        vllm_config.scheduler_config.async_scheduling = False
        # A forked engine process cannot use a device its parent started.
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = "vllm_torch_tpu.worker.TpuWorker"
        if parallel_config.distributed_executor_backend in (None, "auto"):
            # One process per device: more than one device means vLLM's
            # multiprocessing executor, its workers spawned (above), each holding
            # the device of its local rank (TpuWorker.init_device).
            parallel_config.distributed_executor_backend = (
                "mp" if parallel_config.world_size > 1 else "uni"
            )
        parallel_config.enable_dbo = False
        parallel_config.disable_custom_all_reduce = True

        compilation_config = vllm_config.compilation_config
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        compilation_config.cudagraph_capture_sizes = []
        # Models run their plain-PyTorch forward (CustomOp.forward_native).
        compilation_config.custom_ops = ["none"]
        if compilation_config.mode != CompilationMode.NONE:  # not enforce_eager
            # The model traced once by Dynamo (sizes symbolic, guards dropped, as
            # vLLM's own compile mode does) into torch.compile's "tpu" backend: each
            # padded batch size replays one program per run of layers between the
            # attention ops, which run at every step.
            compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
            compilation_config.backend = "tpu"

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Attention as vLLM's custom ops: a compiled model calls them at every step
        # (they read the step's metadata from the forward context), and records the
        # layers between them.
        return True

    @classmethod
    def get_punica_wrapper(cls) -> str:
        return "vllm.lora.punica_wrapper.punica_cpu.PunicaWrapperCPU"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return (
            "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"
        )

    @classmethod
    def use_custom_op_collectives(cls) -> bool:
        # Collectives as vLLM's custom ops (torch.ops.vllm.all_reduce, ...): a
        # compiled model calls them at every step (torch.compile's "tpu" backend
        # splits its graphs around other libraries' ops), rather than Dynamo tracing
        # torch.distributed's in-place collectives.
        return True

    @classmethod
    def supports_fp8(cls) -> bool:
        return False

    @classmethod
    def use_all_gather(cls) -> bool:
        return True


@torch._dynamo.register_backend(name="tpu_or_eager")
def tpu_or_eager(gm: torch.fx.GraphModule, example_inputs: list):
    """torch.compile's "tpu" backend for vLLM's small helpers, except those compiled
    with dynamic=True (sizes symbolic, which the tpu backend refuses: it compiles a
    program a shape), which run their ops as they are, in the current eager mode (the
    vocabulary mask of a tensor-parallel embedding, with enforce_eager). In a compiled
    model the helpers are traced into the model's graphs."""
    if not torch._dynamo.config.assume_static_by_default:
        return gm.forward
    return torch._dynamo.lookup_backend("tpu")(gm, example_inputs)


# Where device_facts keeps what it learnt, for this process and those it starts.
_FACTS_ENV = "VLLM_TORCH_TPU_DEVICE_FACTS"


def device_facts(device_id: int) -> dict:
    """The device's name and memory. A process that has not started the device
    (vLLM's front end, which sizes batches from them) asks a short-lived child:
    opening the device would hold it, and the engine process could not."""
    if torch.tpu.is_initialized():
        props = torch.tpu.get_device_properties(device_id)
        return {"name": props.name, "total_memory": props.total_memory}
    known = json.loads(os.environ.get(_FACTS_ENV, "{}"))
    if str(device_id) not in known:
        script = (
            f"import json, torch; p = torch.tpu.get_device_properties({device_id}); "
            "print(json.dumps({'name': p.name, 'total_memory': p.total_memory}))"
        )
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(f"could not query tpu device {device_id}: {out.stderr.strip()}")
        known[str(device_id)] = json.loads(out.stdout.strip().splitlines()[-1])
        os.environ[_FACTS_ENV] = json.dumps(known)
    return known[str(device_id)]


def _is_cpu_platform() -> bool:
    import torch_tpu

    return torch_tpu.platform() == "cpu"
