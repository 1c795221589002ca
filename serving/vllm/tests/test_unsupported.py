"""vLLM features the tpu platform does not serve fail at start-up with an error that
names them (not at the first request, nor inside a CUDA kernel)."""

import pytest

vllm = pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")


def test_quantized_weights_name_themselves(model_dir):
    with pytest.raises(ValueError, match=r"quantized weights \(fp8\) are not supported on tpu"):
        vllm.LLM(model=model_dir("llama"), quantization="fp8", max_model_len=256)


def test_lora_names_itself(model_dir, monkeypatch):
    # The engine in this process, so that the worker's error reaches the caller as it is.
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with pytest.raises(NotImplementedError, match="LoRA is not supported on tpu"):
        vllm.LLM(model=model_dir("llama"), enable_lora=True, max_model_len=256)
