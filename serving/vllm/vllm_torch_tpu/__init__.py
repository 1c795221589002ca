"""vLLM platform plugin for torch_tpu: `LLM(model=...)` and `vllm serve` on the tpu device."""


def platform_plugin() -> str | None:
    """The Platform class vLLM should use, or None where no tpu device is present."""
    import torch

    if not (hasattr(torch, "tpu") and torch.tpu.is_available()):
        return None
    return "vllm_torch_tpu.platform.TpuPlatform"
