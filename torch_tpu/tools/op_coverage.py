"""Operator coverage report: which ATen operators run natively on ``tpu`` and how the
OpInfo entries that exercise them compare with the CPU.

    python -m torch_tpu.tools.op_coverage [--dtypes all|float32] [--max-samples N]
                                          [--filter NAME] [--out docs/op_coverage.md]

Prints a table (operator, how it runs, OpInfo result) and a closing summary line, and
writes the report to ``--out``.

Counting rule: distinct ATen operator names with a lowering rule registered for ``tpu``.
An in-place (``add_``) or ``out=`` overload counts with its functional operator, never
separately. Views and metadata ops (handled without programs) are not counted, and
CompositeImplicitAutograd decompositions are never registered. The operators listed
are those PyTorch gives a backend kernel (CPU/CUDA or CompositeExplicitAutograd), except
views and other layouts/backends (sparse, quantized, nested, mkldnn, cudnn, ...). Each
runs as one of:

- ``native``: a lowering rule (counted);
- ``tpu kernel``: a tpu kernel of its own (copies, storage, data-dependent sizes);
- ``composite``: PyTorch decomposes it into other operators, which run on tpu;
- ``fallback``: runs on the CPU (inputs copied to the host and back);
- ``missing``: no kernel that can run (CUDA-only).

An OpInfo entry *exercises* a lowered operator when its ATen name is one; it passes when
every sample (and, for float32, the gradients) matches the CPU with no CPU fallback.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

import torch

import torch_tpu
from torch_tpu.tools import opinfo_runner

OTHER_LAYOUTS = re.compile(
    r"sparse|quantize|qint|nested|mkldnn|cudnn|miopen|mps|vulkan|xnnpack|qnnpack|fbgemm"
    r"|_cslt|coo|csr|csc|bsr|bsc|^q_|^_mkl|padded_dense|^_cufft|^_cudnn|^_nnpack"
)


def fold(name: str) -> str:
    """``aten::add_.Tensor`` -> ``add``."""
    name = name.split(".")[0].removeprefix("aten::")
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def lowered_operators() -> set[str]:
    return {fold(full) for full in torch_tpu._C._lowered_ops()}


def aten_name(op) -> str:
    name = op.aten_name or op.name
    return name.removeprefix("aten::")


def load_op_db():
    os.environ.setdefault("PYTORCH_TEST_WITH_SLOW", "0")
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _has(op: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


def _is_view(op: str) -> bool:
    name, _, overload = op.partition(".")
    try:
        schema = torch._C._get_schema(name, overload)
    except RuntimeError:
        return False
    returns = [r.alias_info for r in schema.returns]
    return bool(returns) and all(a is not None and not a.is_write for a in returns)


def operator_table(lowered: set[str]) -> dict[str, str]:
    """How each ATen operator with a backend kernel runs on tpu, by folded name."""
    overloads = collections.defaultdict(list)
    for op in torch._C._dispatch_get_all_op_names():
        if op.startswith("aten::"):
            overloads[fold(op)].append(op)
    table = {}
    for name, ops in overloads.items():
        if OTHER_LAYOUTS.search(name) or any(_is_view(op) for op in ops):
            continue
        if all(_has(op, "CompositeImplicitAutograd") for op in ops):
            continue
        if name in lowered:
            table[name] = "native"
        elif any(_has(op, "PrivateUse1") for op in ops):
            table[name] = "tpu kernel"
        elif any(
            _has(op, "CompositeExplicitAutograd")
            or _has(op, "CompositeExplicitAutogradNonFunctional")
            for op in ops
        ):
            table[name] = "composite"
        elif any(_has(op, "CPU") for op in ops):
            table[name] = "fallback"
        else:
            table[name] = "missing"
    return table


def entry_status(results: dict) -> str:
    statuses = [r.status for r in results.values()]
    for s in ("fail", "fallback", "pass"):
        if s in statuses:
            return s
    return "skip"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dtypes",
        choices=["all", "float32"],
        default="all",
        help="dtypes per OpInfo entry: all it supports, or float32 only (default: all)",
    )
    parser.add_argument(
        "--max-samples", type=int, default=3, help="sample inputs per entry and dtype (default: 3)"
    )
    parser.add_argument(
        "--filter", default="", help="only the OpInfo entries whose name contains this"
    )
    parser.add_argument(
        "--out", default="docs/op_coverage.md", help="report file (default: docs/op_coverage.md)"
    )
    args = parser.parse_args(argv)

    torch_tpu._C._set_fallback_mode("silent")
    lowered = lowered_operators()
    entries = [op for op in load_op_db() if args.filter in opinfo_runner.entry_name(op)]
    results: dict[str, dict[torch.dtype, opinfo_runner.Result]] = {}
    start = time.time()
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        for i, op in enumerate(entries):
            name = opinfo_runner.entry_name(op)
            dtypes = opinfo_runner.dtypes_to_check(op)
            if args.dtypes == "float32":
                dtypes = [d for d in dtypes if d == torch.float32][:1] or dtypes[:1]
            results[name] = {
                dtype: opinfo_runner.run_entry(op, dtype, max_samples=args.max_samples)
                for dtype in dtypes
            }
            summary = ",".join(f"{str(d)[6:]}:{r.status}" for d, r in results[name].items())
            print(
                f"[{i + 1}/{len(entries)} {time.time() - start:6.0f}s] {name}: {summary}",
                file=sys.stderr,
                flush=True,
            )
    elapsed = time.time() - start

    by_op = collections.defaultdict(list)
    for op in entries:
        by_op[aten_name(op)].append(opinfo_runner.entry_name(op))
    table = operator_table(lowered)
    exercising = [opinfo_runner.entry_name(op) for op in entries if aten_name(op) in lowered]
    counted = [e for e in exercising if entry_status(results[e]) != "skip"]
    passed = [e for e in counted if entry_status(results[e]) == "pass"]
    rate = 100.0 * len(passed) / len(counted) if counted else 0.0
    kinds = collections.Counter(table.values())

    def opinfo_cell(name):
        names = by_op.get(name, [])
        if not names:
            return "not covered"
        statuses = collections.Counter(entry_status(results[e]) for e in names)
        return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))

    rows = [(name, table[name], opinfo_cell(name)) for name in sorted(table)]
    if not args.filter:
        for name, how, cell in rows:
            print(f"{name:48s} {how:12s} {cell}")
    summary = (
        f"{len(lowered)} operators lowered natively, {kinds['tpu kernel']} more with tpu "
        f"kernels, {kinds['composite']} composite, {kinds['fallback']} fall back to the "
        f"CPU, {kinds['missing']} missing; {len(passed)}/{len(counted)} OpInfo entries "
        f"exercising lowered operators pass with no fallback ({rate:.1f}%); "
        f"{len(entries)} entries run in {elapsed:.0f} s"
    )

    lines = [
        "# Operator coverage",
        "",
        "Generated by `python -m torch_tpu.tools.op_coverage"
        + (f" --dtypes {args.dtypes}" if args.dtypes != "all" else "")
        + (f" --filter {args.filter}" if args.filter else "")
        + f" --max-samples {args.max_samples}` (counting rule and categories in the"
        " tool's docstring).",
        "",
        f"**{summary}.**",
        "",
        "## Known failures (xfail in tests/test_ops.py)",
        "",
    ]
    lines += [f"- `{k}`: {v}" for k, v in sorted(opinfo_runner.KNOWN_FAILURES.items())]
    lines += ["", "## Entries exercising lowered operators that do not pass", ""]
    for name in exercising:
        for dtype, r in results[name].items():
            if r.status != "pass":
                lines.append(f"- `{name}` {str(dtype)[6:]}: {r.status} — {r.detail}")
    lines += ["", "## Failures of other entries", ""]
    for name in results:
        if name not in exercising:
            for dtype, r in results[name].items():
                if r.status == "fail":
                    lines.append(f"- `{name}` {str(dtype)[6:]}: {r.detail}")
    fell_back = collections.Counter()
    for name in results:
        for r in results[name].values():
            fell_back.update(r.fallbacks)
    lines += ["", "## Operators that fell back, by number of entry/dtype runs", ""]
    lines += [f"- `{op}`: {n}" for op, n in fell_back.most_common()]
    lines += ["", "## Operators", "", "| operator | runs as | OpInfo entries |", "|---|---|---|"]
    lines += [f"| {name} | {how} | {cell} |" for name, how, cell in rows]
    lines += [
        "",
        "## OpInfo entries",
        "",
        "| entry | ATen op | results by dtype |",
        "|---|---|---|",
    ]
    for op in entries:
        name = opinfo_runner.entry_name(op)
        cells = ", ".join(f"{str(d)[6:]}: {r.status}" for d, r in results[name].items())
        lines.append(f"| {name} | {aten_name(op)} | {cells} |")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
