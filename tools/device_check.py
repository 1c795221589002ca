"""The project's check on a machine with an accelerator, in one command and one time budget.

    python3 tools/device_check.py [--out DIR] [--budget SECONDS] [--build DIR] [--platform P]

Runs with the interpreter that starts it and the torch that interpreter has (nothing is
installed or downloaded: a GPU machine has no network), in stages, each in its own process
with a deadline, and writes DIR/summary.txt (one line per stage, the failures' tails) beside
a log per stage:

  env     what the machine is (GPUs, Python, torch, jax, the plugin the platform selects)
  build   CMake + Ninja against this interpreter's torch, in --build (default build-device)
  start   the backend's start, step by step, so that a crash says where: the C++ runtime
          creating a client with no torch in the process; the full start under Python; on
          the cuda platform, JAX's own client beside PyTorch's CUDA (does the plugin start
          at all in a torch process?), and a native backtrace under cuda-gdb if a step crashed
  collectives  a one-node job's client made through the c10d store and a tpu_dist
          all-reduce inside a program; on the cuda platform, a program of two replicas on
          one GPU with NCCL mocked (the client of node 0 of a two-node job)
  cpp     the C++ tests against the selected plugin
  pytest  a subset of the suite on the platform (pytest-xdist; each worker takes its own
          lock directory, see tests/conftest.py)
  bench   benchmarks/gpu_train.py, a GPT training step against PyTorch's own backend
          (--bench: which variants; the full comparison is that script's own run)

Stages left without time are reported as skipped. The platform is TORCH_TPU_PLATFORM's
(default: auto, i.e. the machine's accelerator, else the CPU). `make device-check` runs it
on the CPU platform with the project's venv, to try it before spending device time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PYTEST_FILES = [
    "tests/test_device.py",
    "tests/test_views.py",
    "tests/test_training.py",
    "tests/test_precision.py",
    "tests/test_eager_modes.py",
    "tests/test_ops_matmul.py",
    "tests/test_ops_attention.py",
    "tests/test_compile.py",
    "tests/test_amp.py",
]

# The benchmark's variants that fit the check's time: the compiled step against Inductor
# and the host overhead of one op.
BENCH_VARIANTS = "ref-inductor,tpu-compile,overhead-ref,overhead-tpu"
BENCH_SECONDS = 180

START_PYTHON = """
import torch, torch_tpu
torch.tpu.init()
print("platform", torch_tpu.platform(), "|", torch.tpu.get_device_name(), "|",
      torch.tpu.device_count(), "device(s) |", torch.tpu.get_device_properties(0))
x = torch.arange(6.0, device="tpu").reshape(2, 3)
print("result", (x @ x.T).cpu().tolist())
"""

# The client of a one-node job made through the c10d store (as each process of a
# multi-process job makes it), and a tpu_dist all-reduce inside a program.
JOB_PYTHON = """
from datetime import timedelta
import torch, torch_tpu, torch.distributed as dist
from torch_tpu import _C
store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=60))
assert _C._join_job(store, 0, 1, 0), "the backend started before the job was joined"
dist.init_process_group("tpu_dist", rank=0, world_size=1, store=store)
x = torch.arange(4.0, device="tpu")
before = torch_tpu.metrics()["program_collectives"]
dist.all_reduce(x)
in_programs = torch_tpu.metrics()["program_collectives"] - before
print("result", x.cpu().tolist(), "collectives in programs:", in_programs)
assert in_programs == 1 and x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
dist.destroy_process_group()
"""

JAX_BESIDE_TORCH = """
import torch
torch.zeros(1, device="cuda")
import jax
print("jax", jax.__version__, jax.devices("cuda"))
print("result", float(jax.numpy.arange(4.0).sum()))
"""


class Check:
    def __init__(self, out: Path, budget: float):
        self.out = out
        self.deadline = time.monotonic() + budget
        self.start = time.monotonic()
        self.failed = 0
        out.mkdir(parents=True, exist_ok=True)
        self.summary = open(out / "summary.txt", "w", buffering=1)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def note(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:5.0f}s] {text}"
        print(line, flush=True)
        self.summary.write(line + "\n")

    def run(
        self,
        name: str,
        cmd: list[str],
        log: str,
        *,
        limit: float,
        env=None,
        tail: int = 12,
        cwd: Path = ROOT,
    ) -> int | None:
        """Runs `cmd`, appending its output to `log`; returns its status (None: skipped or timed
        out). Failures put the log's tail in the summary."""
        limit = min(limit, self.left() - 5)
        if limit < 10:
            self.note(f"SKIP {name} (no time left)")
            return None
        began = time.monotonic()
        with open(self.out / log, "a") as f:
            f.write(f"\n### {name}: {' '.join(cmd)}\n")
            f.flush()
            try:
                rc = subprocess.run(
                    cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env, timeout=limit
                ).returncode
            except subprocess.TimeoutExpired:
                rc = None
        took = time.monotonic() - began
        status = "timed out" if rc is None else "ok" if rc == 0 else f"rc={rc}"
        self.note(f"{'PASS' if rc == 0 else 'FAIL'} {name} ({status}, {took:.0f}s)")
        if rc != 0:
            self.failed += 1
            lines = (self.out / log).read_text(errors="replace").splitlines()
            for line in lines[-tail:]:
                self.summary.write(f"        | {line}\n")
        return rc


def python_env(build: Path) -> dict[str, str]:
    """The environment that makes this checkout importable without installing it: the repository
    on the path, and a dist-info beside it carrying pyproject.toml's entry points, so that
    `import torch` autoloads the backend and torch.compile finds "tpu" as after `pip install`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="1")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    try:
        importlib.metadata.distribution(meta["name"])
        return env  # installed (make's editable install)
    except importlib.metadata.PackageNotFoundError:
        pass
    dist = build / "site" / f"torch_tpu-{meta['version']}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    groups = meta["entry-points"]
    (dist / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n"
            for group, points in groups.items()
        )
    )
    env["PYTHONPATH"] = os.pathsep.join(
        [str(build / "site"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    return env


def selection(py: str, env: dict[str, str]) -> tuple[str, str]:
    code = (
        "import torch_tpu._platform as p; s = p.select(); print(s.platform); print(s.plugin or '')"
    )
    out = subprocess.run(
        [py, "-c", code],
        capture_output=True,
        text=True,
        env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
        cwd=ROOT,
    )
    platform, plugin = (out.stdout.splitlines() + ["", ""])[:2]
    return platform or "cpu", plugin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        default=os.environ.get("OUT") or "/tmp/device-check",
        help="folder of summary.txt and the logs (default: $OUT, else /tmp/device-check)",
    )
    parser.add_argument(
        "--budget", type=float, default=460, help="seconds for everything (default: 460)"
    )
    parser.add_argument(
        "--build",
        default=str(ROOT / "build-device"),
        help="CMake build folder (default: build-device/ in the tree)",
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 2, help="compile jobs (default: the cores)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=min(8, max(1, (os.cpu_count() or 2) // 2)),
        help="pytest-xdist workers (default: half the cores, 1 to 8)",
    )
    parser.add_argument(
        "--pytest",
        nargs="*",
        default=PYTEST_FILES,
        help="test files (or -k ...) (default: a subset)",
    )
    parser.add_argument(
        "--bench",
        default=BENCH_VARIANTS,
        help=f"gpu_train.py variants ('': none) (default: {BENCH_VARIANTS})",
    )
    args = parser.parse_args()

    check = Check(Path(args.out), args.budget)
    py = sys.executable
    build = Path(args.build).resolve()
    env = python_env(build)

    check.note(f"env: {sys.version.split()[0]} at {py}, {os.cpu_count()} cores")
    versions = (
        "import importlib.metadata as m, torch\n"
        "print('torch', torch.__version__)\n"
        "for name in ('jax', 'jaxlib', 'jax-cuda13-pjrt', 'jax-cuda13-plugin', 'nvidia-cudnn-cu13'):\n"
        "    try: print(name, m.version(name))\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    if shutil.which("nvidia-smi"):
        check.run("nvidia-smi", ["nvidia-smi", "-L"], "env.log", limit=30)
    check.run(
        "versions",
        [py, "-c", versions],
        "env.log",
        limit=60,
        env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
    )

    torch_dir = subprocess.run(
        [py, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
        capture_output=True,
        text=True,
        env=dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
    ).stdout.strip()
    configure = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DTORCH_DIR={torch_dir}",
        f"-DPython_EXECUTABLE={py}",
    ]
    if check.run("build: configure", configure, "build.log", limit=120, tail=30) != 0:
        return 1
    if (
        check.run(
            "build: compile",
            ["cmake", "--build", str(build), "--", f"-j{args.jobs}"],
            "build.log",
            limit=400,
            tail=30,
        )
        != 0
    ):
        return 1

    platform, plugin = selection(py, env)
    env["TORCH_TPU_PLATFORM"] = platform
    check.note(f"platform {platform}, plugin {plugin or '(none)'}")
    runtime_env = dict(env, TORCH_TPU_PLUGIN=plugin)
    crashed = []
    core_tests = str(build / "tpu_core_tests")
    steps = [
        ("start: C++ client, no torch", [core_tests, "runtime_plugin_reports"]),
        ("start: torch_tpu under Python", [py, "-X", "faulthandler", "-c", START_PYTHON]),
    ]
    if platform == "cuda":
        steps.append(("start: JAX's CUDA client beside torch's CUDA", [py, "-c", JAX_BESIDE_TORCH]))
    for name, cmd in steps:
        rc = check.run(name, cmd, "start.log", limit=180, env=runtime_env, tail=25)
        if rc is not None and rc < 0:
            crashed.append(cmd)
    debugger = shutil.which("cuda-gdb") or shutil.which("gdb")
    for cmd in crashed[:1] if debugger else []:
        check.run(
            "start: native backtrace of the crash",
            [debugger, "-batch", "-ex", "run", "-ex", "bt 40", "--args", *cmd],
            "start.log",
            limit=240,
            env=runtime_env,
            tail=45,
        )

    check.run(
        "collectives: a job's client through the c10d store, an all-reduce in a program",
        [py, "-X", "faulthandler", "-c", JOB_PYTHON],
        "collectives.log",
        limit=180,
        env=runtime_env,
        tail=25,
    )
    if platform == "cuda":
        check.run(
            "collectives: two replicas on one GPU, NCCL mocked",
            [core_tests, "runtime_mock_nccl"],
            "collectives.log",
            limit=120,
            env=dict(runtime_env, TORCH_TPU_MOCK_NCCL="1"),
            tail=25,
        )
    check.run("cpp tests", [core_tests], "cpp.log", limit=120, env=runtime_env, tail=20)
    check.run(
        "pytest subset",
        [
            py,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            str(args.workers),
            "--durations=5",
            *args.pytest,
        ],
        "pytest.log",
        limit=max(60, check.left() - (BENCH_SECONDS if args.bench else 10)),
        env=env,
        tail=40,
    )
    if args.bench:
        budget = check.left() - 15
        rc = check.run(
            "benchmark: GPT training step",
            [py, "benchmarks/gpu_train.py", "--variants", args.bench, f"--budget={budget}"],
            "bench.log",
            limit=budget + 10,
            env=env,
            tail=20,
        )
        if rc == 0:  # the table (a failure's tail is there already)
            table = (check.out / "bench.log").read_text().splitlines()[-8:]
            check.summary.write("".join(f"        | {x}\n" for x in table))
    check.note(f"done: {check.failed} stage(s) failed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
