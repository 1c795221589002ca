"""Serving on tpu with vLLM (the plugin in serving/vllm) against Hugging Face `generate`.

Run in the serving environment (`make serve-env`):
``.venv-vllm/bin/python benchmarks/serving.py [--requests 64] [--new-tokens 32] [--rounds 3]``.

Prints, for a tiny Llama built here (random weights, the serving tests' model; nothing is
downloaded; `--hidden`/`--layers` make it larger):

- output tokens/s of `LLM.generate` for `--requests` requests of random prompt lengths at
  once, against Hugging Face `generate` on tpu one request at a time and on the CPU one
  request at a time, in alternating rounds (medians; Hugging Face on a subset of the
  requests, `--hf-requests`, as its rate does not depend on how many run one after
  another), and the ratios (issue 40's goal: >= 5x Hugging Face on tpu);
- start-up (`LLM(...)` until it can serve, warm-up included) in a fresh process with an
  empty program cache (cold) and again with the cache it left (warm), with the programs
  compiled at start-up and the new programs of the timed rounds (`torch_tpu.metrics()`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over lazy dog one two three four five six".split()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64, help="requests per round (64)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per request (32)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    parser.add_argument(
        "--hf-requests", type=int, default=4, help="requests Hugging Face runs per round (4)"
    )
    parser.add_argument("--hidden", type=int, default=64, help="hidden size (64)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers (2)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (4; 2 KV heads)")
    parser.add_argument("--max-model-len", type=int, default=256, help="vLLM's max_model_len (256)")
    parser.add_argument(
        "--startup-only", action="store_true", help="measure start-up (cold, cached) alone"
    )
    parser.add_argument("--model", help="a model folder to serve instead of the tiny Llama")
    parser.add_argument("--startup", help=argparse.SUPPRESS)  # a child: time LLM(...) alone
    return parser.parse_args()


def tiny_llama(path: str, hidden: int, layers: int, heads: int, max_model_len: int) -> None:
    """The serving tests' tiny Llama (their tokenizer and weight scale) at a given size."""
    spec = importlib.util.spec_from_file_location(
        "serving_conftest", ROOT / "serving/vllm/tests/conftest.py"
    )
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    conftest.save_model(
        path, "llama", hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, max_position_embeddings=max(512, max_model_len),
    )  # fmt: skip


def make_llm(path: str, max_model_len: int):
    from vllm import LLM

    return LLM(model=path, dtype="float32", max_model_len=max_model_len, seed=0)


def startup(path: str, max_model_len: int) -> None:
    """In a child process: LLM(...) timed, with the programs it compiled."""
    import torch_tpu

    start = time.perf_counter()
    make_llm(path, max_model_len)
    seconds = time.perf_counter() - start
    metrics = torch_tpu.metrics()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(json.dumps({"seconds": seconds, "compiled": metrics["compiles"],
                      "from_cache": metrics["persistent_cache_hits"], "peak_gib": peak}))  # fmt: skip


def timed_startup(path: str, cache_dir: str, max_model_len: int) -> dict:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    out = subprocess.run(
        [sys.executable, __file__, "--startup", path, "--max-model-len", str(max_model_len)],
        env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"start-up failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(4, 48))) for _ in range(count)]


def hugging_face_rate(model, tokenizer, texts: list[str], new_tokens: int, device: str) -> float:
    """Output tokens/s of Hugging Face `generate`, one request at a time (greedy)."""
    start = time.perf_counter()
    for text in texts:
        ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False)  # fmt: skip
        out.cpu()
    return len(texts) * new_tokens / (time.perf_counter() - start)


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.startup:
        startup(args.startup, args.max_model_len)
        return
    # The engine in this process, so that torch_tpu.metrics() counts its programs.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    work = tempfile.mkdtemp(prefix="serving-bench-")
    path = args.model
    if path is None:
        path = os.path.join(work, "llama")
        tiny_llama(path, args.hidden, args.layers, args.heads, args.max_model_len)

    cache = os.path.join(work, "programs")
    cold = timed_startup(path, cache, args.max_model_len)
    warm = timed_startup(path, cache, args.max_model_len)
    for name, run in (("cold", cold), ("with the program cache", warm)):
        print(f"start-up, {name}: {run['seconds']:.1f} s, {run['compiled']} programs compiled, "
              f"{run['from_cache']} read from the cache, peak memory {run['peak_gib']:.1f} GiB")  # fmt: skip
    if args.startup_only:
        return

    import torch
    import torch_tpu
    import transformers
    from vllm import SamplingParams

    llm = make_llm(path, args.max_model_len)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    hf = {
        device: transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        .to(device)
        .eval()
        for device in ("tpu", "cpu")
    }
    params = SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True)
    # One untimed pass of each variant (the Hugging Face ones compile their programs).
    llm.generate(prompts(args.requests, seed=-1), params, use_tqdm=False)
    for device, model in hf.items():
        hugging_face_rate(model, tokenizer, prompts(1, seed=-1), args.new_tokens, device)

    rates: dict[str, list[float]] = {"vllm": [], "hf tpu": [], "hf cpu": []}
    programs = 0
    for r in range(args.rounds):
        texts = prompts(args.requests, seed=r)
        before = torch_tpu.metrics()["cache_misses"]
        start = time.perf_counter()
        outs = llm.generate(texts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        programs += torch_tpu.metrics()["cache_misses"] - before
        rates["vllm"].append(sum(len(o.outputs[0].token_ids) for o in outs) / seconds)
        for device, model in hf.items():
            rates[f"hf {device}"].append(
                hugging_face_rate(
                    model, tokenizer, texts[: args.hf_requests], args.new_tokens, device
                )
            )
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{args.requests} requests x {args.new_tokens} tokens, {args.rounds} rounds (medians):")
    for name, value in median.items():
        print(f"  {name:7s} {value:9.1f} output tokens/s")
    print(f"  vLLM plugin / HF generate on tpu: {median['vllm'] / median['hf tpu']:.1f}x; "
          f"/ HF generate on the CPU: {median['vllm'] / median['hf cpu']:.1f}x")  # fmt: skip
    print(f"  new programs during the timed vLLM rounds: {programs}")
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
