"""CI's sample of the model zoo (python -m torch_tpu.tools.model_zoo runs every architecture):
Hugging Face architectures of each family match the CPU forward, in one training step and,
for decoders, in greedy generation."""

import pytest

from torch_tpu.tools import model_zoo

ARCHITECTURES = {name: (name, family, cls) for name, family, cls in model_zoo.architectures()}


def test_sample_covers_every_family():
    families = {ARCHITECTURES[name][1] for name in model_zoo.SAMPLE}
    assert families == {"decoder", "encoder", "encoder-decoder", "vision", "audio"}
    assert len(model_zoo.SAMPLE) >= 10


@pytest.mark.parametrize("name", model_zoo.SAMPLE)
def test_architecture_matches_cpu(name, no_fallback):
    result = model_zoo.run_architecture(*ARCHITECTURES[name])
    assert result.cpu_ok, result.error
    assert result.tier1, result.error
    assert result.tier2, result.error
    if result.family == "decoder":
        assert result.generate_ok
