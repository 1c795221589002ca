"""Hugging Face `generate()` on tpu: what a first continuation compiles, with the default
dynamic cache (strict and fused eager, with automatic bounds for the cache it grows by
concatenation and without: `_per_size`) and with a static cache (compiled), against CPU
eager in the same run.

Each variant runs in a fresh process with empty compilation caches (tpu's and PyTorch's),
so its numbers are a first run's. Prints, per variant: seconds of the first and the second
`generate()` (the second from a prompt of another length), programs compiled in each, the
ratio to CPU eager's time, and for the strict dynamic cache the ops whose programs were
compiled most (read from TORCH_TPU_DUMP_DIR). Run:
``.venv/bin/python benchmarks/generate.py [--new-tokens 32]``.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated (default: 32)")
    parser.add_argument(
        "--prompts", default="7,11,7", help="prompt lengths of the calls (default: 7,11,7)"
    )
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in this process
    return parser.parse_args()


ARGS = parse_args() if __name__ == "__main__" else None


def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(config).eval()


def run_variant(args: argparse.Namespace) -> dict:
    """One variant: two generate() calls; prints a JSON line."""
    import torch

    import torch_tpu

    device = "cpu" if args.variant == "cpu" else "tpu"
    model = tiny_llama().to(device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
    if args.variant == "static_compiled":
        kwargs["cache_implementation"] = "static"
        model.forward = torch.compile(model.forward, backend="tpu")
    calls = []
    for n in (int(p) for p in args.prompts.split(",")):
        prompt = torch.arange(1, n + 1, device=device).view(1, n) % 256
        before = torch_tpu.metrics()["compiles"]
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, **kwargs)
        out.cpu()
        calls.append(
            {
                "seconds": round(time.perf_counter() - start, 2),
                "programs": torch_tpu.metrics()["compiles"] - before,
                "tokens": out[0, n:].tolist(),
            }
        )
    return {"variant": args.variant, "calls": calls}


# Environment of each variant's process (the cpu and static_compiled variants: none).
VARIANT_ENV = {
    "dynamic_eager": {},
    "dynamic_eager_per_size": {"TORCH_TPU_AUTOMATIC_BOUNDS": "0"},
    "dynamic_fused": {"TORCH_TPU_EAGER_MODE": "defer_and_fuse"},
    "dynamic_fused_per_size": {
        "TORCH_TPU_EAGER_MODE": "defer_and_fuse",
        "TORCH_TPU_AUTOMATIC_BOUNDS": "0",
    },
}


def spawn(args: argparse.Namespace, variant: str, dump: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache)
        env.update(VARIANT_ENV.get(variant, {}))
        if dump:
            env["TORCH_TPU_DUMP_DIR"] = dump
        command = [sys.executable, __file__, f"--variant={variant}"]
        command += [f"--new-tokens={args.new_tokens}", f"--prompts={args.prompts}"]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def programs_by_op(dump: str, first: int) -> collections.Counter:
    names = collections.Counter()
    for name in os.listdir(dump):
        if int(name.split("_")[1].split(".")[0]) < first:
            with open(os.path.join(dump, name)) as f:
                names[f.readline().removeprefix("// ").strip()] += 1
    return names


def main(args: argparse.Namespace) -> None:
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    with tempfile.TemporaryDirectory() as dump:
        results = {"dynamic_eager": spawn(args, "dynamic_eager", dump)}
        first_call = programs_by_op(dump, results["dynamic_eager"]["calls"][0]["programs"])
    names = [*VARIANT_ENV, "static_compiled"]
    for name in names[1:]:
        results[name] = spawn(args, name)
    results["cpu"] = spawn(args, "cpu")
    cpu = results["cpu"]["calls"]
    print(f"tiny Llama, greedy generate() of {args.new_tokens} tokens, prompts {args.prompts}")
    for name in names:
        for k, (call, ref) in enumerate(zip(results[name]["calls"], cpu)):
            same = "same tokens as CPU" if call["tokens"] == ref["tokens"] else "TOKENS DIFFER"
            print(
                f"  {name:22} call {k + 1}: {call['programs']:4} programs, {call['seconds']:6.2f} s"
                f" ({call['seconds'] / ref['seconds']:.1f}x CPU eager's {ref['seconds']:.2f} s), {same}"
            )
    total = sum(first_call.values())
    print(f"  dynamic_eager's first call: {total} programs, by op (most first):")
    for op, n in first_call.most_common(12):
        print(f"    {n:4}  {op}")


if __name__ == "__main__":
    main(ARGS)
