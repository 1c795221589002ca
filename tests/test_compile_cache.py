"""The persistent compilation cache: a second process loads what the first compiled;
unreadable entries are ignored and replaced."""

import tempfile

import pytest
import torch

from tests.test_device import run_python

SCRIPT = """
import torch, torch_tpu
x = torch.arange(12.0, device="tpu").reshape(3, 4)
y = ((x @ x.T).softmax(-1) * 3).sum(0)
print("VALUE", [round(v, 4) for v in y.tolist()])
m = torch_tpu.metrics()
print("COUNTS", m["compiles"], m["persistent_cache_hits"])
"""


def run(cache_dir):
    out = run_python(
        SCRIPT,
        TORCH_TPU_CACHE_DIR=str(cache_dir),
        TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="compile_cache_"),
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    compiles, loads = map(int, lines["COUNTS"].split())
    return lines["VALUE"], compiles, loads


def test_second_process_compiles_nothing(tmp_path):
    value, compiles, loads = run(tmp_path)
    assert compiles > 0 and loads == 0
    assert len(list(tmp_path.glob("*.xla"))) == compiles
    again, compiles2, loads2 = run(tmp_path)
    assert again == value
    assert compiles2 == 0 and loads2 == compiles


def test_corrupt_entries_are_rebuilt(tmp_path):
    value, compiles, _ = run(tmp_path)
    for entry in tmp_path.glob("*.xla"):
        entry.write_bytes(entry.read_bytes()[:40] + b"garbage")
    again, compiles2, loads2 = run(tmp_path)
    assert again == value and compiles2 == compiles and loads2 == 0
    # Rewritten: a third process loads them.
    _, compiles3, loads3 = run(tmp_path)
    assert compiles3 == 0 and loads3 == compiles


def test_disabled_cache_writes_nothing(tmp_path):
    out = run_python(
        SCRIPT,
        TORCH_TPU_CACHE_DIR="off",
        HOME=str(tmp_path),
        XDG_CACHE_HOME="",
        TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="compile_cache_"),
    )
    assert out.returncode == 0, out.stderr
    assert not list(tmp_path.rglob("*.xla"))


COMPILED_SCRIPT = """
import torch, torch.nn as nn, torch.nn.functional as F, torch_tpu
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), capturable=True)
x, y = torch.randn(5, 8, device="tpu"), torch.randint(0, 4, (5,), device="tpu")

@torch.compile(backend="tpu")
def step():
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss

print("VALUE", [round(step().item(), 5) for _ in range(2)])
m = torch_tpu.metrics()
print("COUNTS", m["compiles"], m["persistent_cache_hits"])
from torch._dynamo.utils import counters
print("AOT", counters["aot_autograd"]["autograd_cache_hit"], counters["aot_autograd"]["autograd_cache_miss"])
"""


def run_with_caches(script: str, caches) -> dict[str, str]:
    """Runs ``script`` in a new process with its caches under ``caches``; its "KEY value"
    lines."""
    out = run_python(
        script,
        TORCH_TPU_CACHE_DIR=str(caches / "xla"),
        TORCHINDUCTOR_CACHE_DIR=str(caches / "torch"),
        TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="compile_cache_"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def test_second_process_of_a_compiled_step_compiles_nothing(tmp_path):
    """Nor does it trace again with AOTAutograd: its graphs come from AOTAutograd's
    cache (under PyTorch's compile cache directory)."""

    def run_compiled():
        lines = run_with_caches(COMPILED_SCRIPT, tmp_path)
        return lines["VALUE"], *map(int, lines["COUNTS"].split()), *map(int, lines["AOT"].split())

    value, compiles, loads, aot_hits, aot_misses = run_compiled()
    assert compiles > 0 and loads == 0
    assert aot_hits == 0 and aot_misses > 0
    again, compiles2, loads2, aot_hits2, aot_misses2 = run_compiled()
    assert again == value
    assert compiles2 == 0 and loads2 == compiles
    assert aot_hits2 == aot_misses and aot_misses2 == 0


CONSTANT_SCRIPT = """
import torch, torch_tpu
from torch._dynamo.utils import counters

@torch.compile(backend="tpu")
def f(x):
    return (x * torch.tensor([1.0, -2.0, 3.0], device="tpu")).sin()  # a tensor constant

x = torch.linspace(-1, 1, 3, device="tpu", requires_grad=True)
y = f(x)
y.sum().backward()
print("VALUE", y.detach().cpu().tolist(), x.grad.cpu().tolist())
print("AOT", counters["aot_autograd"]["autograd_cache_saved"], counters["aot_autograd"]["autograd_cache_hit"])
"""


def test_graphs_with_tpu_tensor_constants_are_cached(tmp_path):
    """AOTAutograd's cache saves a graph holding a real tpu tensor (it pickles under the
    compile's fake mode) and a second process loads it, constants back on the device."""

    def run_constant():
        lines = run_with_caches(CONSTANT_SCRIPT, tmp_path)
        return lines["VALUE"], lines["AOT"]

    value, aot = run_constant()
    assert aot == "1 0"  # saved
    again, aot2 = run_constant()
    assert again == value and aot2 == "0 1"  # loaded, same values and gradients


def test_processes_exit_cleanly_right_after_a_compiled_backward(tmp_path):
    """PyTorch's autograd thread for the device drops the backward's Python context just
    after backward() returned; at exit that aborted about one process in five ("terminate
    called without an active exception") until torch_tpu let it finish first (atexit)."""
    for run in range(4):
        run_with_caches(CONSTANT_SCRIPT, tmp_path / str(run))  # exit status 0


# ---------------------------------------------------------------- fast compilation

FAST_SCRIPT = """
import torch, torch_tpu
def compiled(fn):
    before = torch_tpu.metrics()
    fn()
    after = torch_tpu.metrics()
    return after["compiles"] - before["compiles"], after["fast_compiles"] - before["fast_compiles"]
# Uploaded, so that each measured program holds one op in every eager mode.
small = torch.linspace(-3, 3, 4096, dtype=torch.float64).to("tpu")
large = torch.linspace(-3, 3, 4097, dtype=torch.float64).to("tpu")
m = torch.linspace(-1, 1, 64, dtype=torch.float64).reshape(8, 8).to("tpu")
print("SMALL", *compiled(lambda: small.sinh().cpu()))
print("LARGE", *compiled(lambda: large.sinh().cpu()))
print("PRODUCT", *compiled(lambda: (m @ m).cpu()))
print("VALUE", repr(small.sinh().sum().item()), repr(large.sinh().sum().item()))
"""


def fast_run(cache_dir, **env):
    out = run_python(
        FAST_SCRIPT,
        TORCH_TPU_CACHE_DIR=str(cache_dir),
        TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="compile_cache_"),
        **env,
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def test_small_linear_programs_compile_fast(tmp_path):
    """Programs of at most 4,096 elements per value and linear work compile at XLA's
    optimisation level 0; larger ones, and products, optimised. Results match the CPU."""
    lines = fast_run(tmp_path)
    assert lines["SMALL"] == "1 1"
    assert lines["LARGE"] == "1 0"
    assert lines["PRODUCT"] == "1 0"
    small, large = (float(v) for v in lines["VALUE"].split())
    expect = [
        torch.linspace(-3, 3, n, dtype=torch.float64).sinh().sum().item() for n in (4096, 4097)
    ]
    assert small == pytest.approx(expect[0], rel=1e-12, abs=1e-9)
    assert large == pytest.approx(expect[1], rel=1e-12, abs=1e-9)
    # TORCH_TPU_FAST_COMPILE=0 compiles everything optimised.
    off = fast_run(tmp_path / "off", TORCH_TPU_FAST_COMPILE="0")
    assert off["SMALL"] == "1 0"
