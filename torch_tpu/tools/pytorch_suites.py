"""Runs PyTorch's device-generic test files on ``tpu`` and writes a report.

    python -m torch_tpu.tools.pytorch_suites --tests DIR [--files test_view_ops,...]
        [--workers 2] [--timeout 900] [--sample N] [--report docs/pytorch_suites.md]

DIR holds test files from PyTorch's repository (``test_*.py``; nothing is downloaded and
the project contains none). Each file runs unedited under pytest-xdist with a time limit,
instantiated for tpu only (``PYTORCH_TESTING_DEVICE_ONLY_FOR=tpu``, ``-k TPU``), through
the plugin ``torch_tpu.tools._pytorch_suite_plugin`` (helpers under their old names, the
tests that cannot pass by design skipped with the reason, one JSON line per outcome). The
failures are run again on the CPU: those that fail there too are the file's, counted
apart. The report gives per file passed / failed / errors / failing on the CPU too /
skipped / time, and the failures grouped by cause (exception type and message with the numbers taken out). ``--sample N`` keeps a
fixed 1/N of each file's tests, at least 3 (by a hash of the test's name): CI's sample.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = "torch_tpu.tools._pytorch_suite_plugin"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", required=True, type=Path, help="folder of PyTorch test files")
    parser.add_argument(
        "--files", default="", help="comma-separated file names (default: every test_*.py)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="pytest-xdist workers, 0: none (default: 2)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900,
        help="seconds per file before it is stopped (default: 900)",
    )
    parser.add_argument(
        "--sample", type=int, default=0, help="keep a fixed 1/N of each file's tests (CI)"
    )
    parser.add_argument("--report", type=Path, default=None, help="write the markdown report here")
    parser.add_argument(
        "--outcomes", type=Path, default=None, help="write every test's outcome here (JSON lines)"
    )
    parser.add_argument(
        "--cpu-baseline",
        action="store_true",
        help="also run each file whole on the CPU and report tpu's time against it (the "
        "tests compute their references on the same cores, so this bounds a file's time)",
    )
    parser.add_argument(
        "--precision",
        default="HIGHEST",
        help="TORCH_TPU_PRECISION for the run: the files compare with float32 tolerances",
    )
    return parser.parse_args(argv)


def session(
    path: Path,
    device: str,
    args: argparse.Namespace,
    workdir: Path,
    name: str,
    only: list[str] | None = None,
) -> tuple[list[dict], str]:
    """One pytest session of the file ``path`` instantiated for ``device`` (of its tests
    ``only``, ids relative to the test folder, when given); returns the outcomes (one dict
    per test) and how the session ended."""
    results = workdir / f"{name}.jsonl"
    results.unlink(missing_ok=True)
    # Not an xdist worker's variables, when this runs under pytest itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        PYTORCH_TESTING_DEVICE_ONLY_FOR=device,
        TORCH_TPU_PRECISION=args.precision,
        TORCH_TPU_SUITE_RESULTS=str(results),
        TORCH_TPU_SUITE_LOCKS=str(workdir / "locks"),
        TORCH_TPU_SUITE_DEADLINE=str(args.timeout),
        TORCH_TPU_SUITE_SAMPLE=str(args.sample if device == "tpu" else 0),
        TORCH_TPU_FALLBACK="silent",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if only is not None:
        only_file = workdir / f"{name}.only"
        only_file.write_text("\n".join(only))
        env["TORCH_TPU_SUITE_ONLY"] = str(only_file)
    cmd = [
        sys.executable, "-m", "pytest", str(path), "-p", PLUGIN, "-q",
        "-n", str(args.workers), "-p", "no:cacheprovider", "--tb=no", "-o", "addopts=",
        "--continue-on-collection-errors", "--rootdir", str(args.tests),
    ]  # fmt: skip
    if device == "tpu":
        cmd += ["-k", "TPU"]  # test_nn and test_torch also define CPU-only classes
    proc = subprocess.Popen(
        cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    ending = "completed"
    try:
        output, _ = proc.communicate(timeout=args.timeout + 60)
    except subprocess.TimeoutExpired:
        # The plugin stops at the deadline; this is the backstop for a hung controller.
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        ending = "stopped at the time limit"
    outcomes = []
    if results.exists():
        outcomes = [json.loads(line) for line in results.read_text().splitlines() if line]
    if ending == "completed" and proc.returncode not in (0, 1, 5):
        ending = f"pytest exited with {proc.returncode}: {output.strip().splitlines()[-1:]}"
    if "time limit" in output and ending == "completed":
        ending = "stopped at the time limit"
    return outcomes, ending


def cpu_counterpart(test_id: str) -> str | None:
    """TestFooTPU::test_bar_tpu_float32 -> TestFooCPU::test_bar_cpu_float32."""
    parts = test_id.split("::")
    if len(parts) != 3 or not parts[1].endswith("TPU") or "_tpu" not in parts[2]:
        return None
    head, _, tail = parts[2].rpartition("_tpu")
    return f"{parts[0]}::{parts[1][:-3]}CPU::{head}_cpu{tail}"


def run_file(path: Path, args: argparse.Namespace, workdir: Path) -> dict:
    """Runs a file on tpu, then its failures on the CPU: a failure the CPU shares is the test
    file's (it is older than the installed torch), not the backend's."""
    start = time.monotonic()
    outcomes, ending = session(path, "tpu", args, workdir, path.stem)
    seconds = time.monotonic() - start
    failed = {
        cpu: o
        for o in outcomes
        if o["outcome"] in ("failed", "error") and (cpu := cpu_counterpart(o["test"]))
    }
    if failed:
        on_cpu, _ = session(path, "cpu", args, workdir, path.stem + "-cpu", only=list(failed))
        for o in on_cpu:
            if o["outcome"] in ("failed", "error") and o["test"] in failed:
                failed[o["test"]]["outcome"] = "cpu too"
    run = {"file": path.name, "seconds": seconds, "ending": ending, "outcomes": outcomes}
    if args.cpu_baseline:
        start = time.monotonic()
        _, cpu_ending = session(path, "cpu", args, workdir, path.stem + "-baseline")
        if cpu_ending == "completed":
            run["cpu seconds"] = time.monotonic() - start
    return run


_NUMBERS = re.compile(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?")


def cause_of(message: str) -> str:
    """A failure's cause: its first line with numbers, shapes and quoted values generalised."""
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    first = re.sub(r"'[^']*'", "'…'", first)
    first = _NUMBERS.sub("N", first)
    return first[:160]


OUTCOMES = ("passed", "failed", "error", "cpu too", "skipped")


def summarise(runs: list[dict]) -> tuple[list[dict], collections.Counter, dict]:
    rows, causes, examples = [], collections.Counter(), {}
    for run in runs:
        counts = collections.Counter(o["outcome"] for o in run["outcomes"])
        rows.append({**run, **{k: counts.get(k, 0) for k in OUTCOMES}})
        for o in run["outcomes"]:
            if o["outcome"] in ("failed", "error"):
                cause = cause_of(o["message"])
                causes[cause] += 1
                examples.setdefault(cause, f"{run['file']}::{o['test'].split('::')[-1]}")
    return rows, causes, examples


def report(runs: list[dict], args: argparse.Namespace) -> str:
    import torch

    rows, causes, examples = summarise(runs)
    ran = sum(r["passed"] + r["failed"] + r["error"] for r in rows)
    passed = sum(r["passed"] for r in rows)
    cpu_too = sum(r["cpu too"] for r in rows)
    lines = [
        "# PyTorch's device-generic test suites on tpu",
        "",
        "Written by `python -m torch_tpu.tools.pytorch_suites` "
        f"(torch {torch.__version__}, `--workers {args.workers} --timeout {args.timeout:g}"
        + (f" --sample {args.sample}`" if args.sample else "`")
        + f", TORCH_TPU_PRECISION={args.precision}), {time.strftime('%Y-%m-%d')}.",
        "",
        f"**{passed} of {ran} tests that ran passed ({100 * passed / max(ran, 1):.1f}%)**, not "
        f"counting {cpu_too} that fail on the CPU as well (the test files are older than the "
        "installed torch). Skipped tests include those that cannot pass by design "
        "(`BY_DESIGN` in `torch_tpu/tools/_pytorch_suite_plugin.py`, each with its reason).",
        "",
        "| file | passed | failed | errors | fail on the CPU too | skipped | seconds "
        "| the file on the CPU: seconds (tpu / CPU) | ending |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cpu = r.get("cpu seconds")
        baseline = f"{cpu:.0f} ({r['seconds'] / cpu:.2f}x)" if cpu else "not run"
        lines.append(
            f"| {r['file']} | {r['passed']} | {r['failed']} | {r['error']} | {r['cpu too']} "
            f"| {r['skipped']} | {r['seconds']:.0f} | {baseline} | {r['ending']} |"
        )
    lines += ["", "## Failures by cause", "", "| tests | cause | example |", "|---|---|---|"]
    for cause, n in causes.most_common():
        text = cause.replace("|", "\\|")
        lines.append(f"| {n} | `{text}` | {examples[cause]} |")
    return "\n".join(lines) + "\n"


def write_results(runs: list[dict], args: argparse.Namespace) -> None:
    if args.report:
        args.report.write_text(report(runs, args))
    if args.outcomes:
        with args.outcomes.open("w") as f:
            for run in runs:
                for o in run["outcomes"]:
                    f.write(json.dumps({"file": run["file"], **o}) + "\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    args.tests = args.tests.resolve()  # pytest runs in a scratch directory
    if not args.tests.is_dir():
        print(f"no test folder at {args.tests}", file=sys.stderr)
        return 2
    names = [n for n in args.files.split(",") if n]
    files = (
        [args.tests / (n if n.endswith(".py") else n + ".py") for n in names]
        if names
        else sorted(args.tests.glob("test_*.py"))
    )
    # A session per file: files change process state at import (test_nn sets the default
    # dtype), and each has its time limit.
    runs = []
    with tempfile.TemporaryDirectory(prefix="torch_tpu_suites_") as tmp:
        for path in files:
            run = run_file(path, args, Path(tmp))
            counts = collections.Counter(o["outcome"] for o in run["outcomes"])
            print(
                f"{run['file']}: {counts.get('passed', 0)} passed, {counts.get('failed', 0)} "
                f"failed, {counts.get('error', 0)} errors, {counts.get('cpu too', 0)} failing "
                f"on the CPU too, {counts.get('skipped', 0)} skipped in {run['seconds']:.0f} s "
                f"({run['ending']})",
                flush=True,
            )
            runs.append(run)
            write_results(runs, args)  # after each file: a run cut short still reports
    if not args.report:
        print(report(runs, args))
    ok = all(r["ending"] == "completed" for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
