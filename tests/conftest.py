import os
import tempfile

# Op tests compare float32 against the CPU exactly; the tpu default (one bf16
# pass) is tested on its own in test_precision.py.
os.environ.setdefault("TORCH_TPU_PRECISION", "HIGHEST")
# Each test session locks the devices in its own directory, so concurrent
# sessions (and subprocesses started by tests) do not collide; pytest-xdist
# workers inherit the controller's environment, so each takes its own.
if os.environ.get("PYTEST_XDIST_WORKER") or "TORCH_TPU_LOCK_DIR" not in os.environ:
    os.environ["TORCH_TPU_LOCK_DIR"] = tempfile.mkdtemp(prefix="torch_tpu_locks_")

import pytest

import torch_tpu


@pytest.fixture
def no_fallback():
    """Fails the test if any op fell back to the CPU inside it."""
    before = dict(torch_tpu.metrics()["fallbacks"])
    yield
    after = torch_tpu.metrics()["fallbacks"]
    new = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
    assert not new, f"ops fell back to the CPU: {new}"


@pytest.fixture(scope="module")
def silent_fallbacks():
    """Fallbacks are counted per entry, not warned about (the OpInfo files); other tests
    in the same xdist worker keep the warn mode."""
    previous = torch_tpu._C._get_fallback_mode()
    torch_tpu._C._set_fallback_mode("silent")
    yield
    torch_tpu._C._set_fallback_mode(previous)
