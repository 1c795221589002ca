"""Host overhead of one cached eager op: ``x.add_(1.0)`` on a small tensor.

Measures, in one run, the time per op on tpu in strict eager (program cache hit:
dispatch, signature, launch) and in defer_and_fuse (recording; the fused graphs of the
loop are compiled by a first, untimed pass of the same loop), and on PyTorch CPU eager,
and prints the ratios. Run:
``.venv/bin/python benchmarks/eager_overhead.py [--ops 10000]``.
"""

import argparse
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=10000, help="timed ops (default: 10000)")
    parser.add_argument(
        "--size", type=int, default=16, help="elements of the tensor added to (default: 16)"
    )
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch

import torch_tpu


def per_op_seconds(x: torch.Tensor, ops: int, sync) -> float:
    # A first pass of the same loop compiles its programs (in defer_and_fuse, the
    # graphs the loop is cut into) and fills the caches.
    for _pass in range(2):
        sync()
        start = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        sync()
    return (time.perf_counter() - start) / ops


def main(args: argparse.Namespace) -> None:
    cpu = per_op_seconds(torch.zeros(args.size), args.ops, lambda: None)
    print(f"ops: {args.ops}, tensor size: {args.size}, platform: {torch_tpu.platform()}")
    print(f"PyTorch CPU eager:      {cpu * 1e6:8.2f} us/op")
    for mode, what in (("strict", "cache hit"), ("defer_and_fuse", "recorded")):
        with torch_tpu.eager_mode(mode):
            tpu = per_op_seconds(
                torch.zeros(args.size, device="tpu"), args.ops, torch.tpu.synchronize
            )
        print(f"tpu {mode:14} {tpu * 1e6:8.2f} us/op ({what}), {tpu / cpu:5.1f}x CPU eager")


if __name__ == "__main__":
    main(ARGS)
