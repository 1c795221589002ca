"""TorchTitan's llama3 debug model, trained on tpu with TorchTitan's own command line.

    python examples/torchtitan/run.py                      # 1 process, eager
    python examples/torchtitan/run.py --nproc 2 --mode compile
    python examples/torchtitan/run.py --mode defer_and_fuse -- --training.steps 20

Everything tpu-specific is configuration: the device is found by TorchTitan itself (torch's
PrivateUse1 device type), `tpu_dist` is the process group's backend for "tpu", the eager mode
is an environment variable. The stand-in assets (a tokenizer trained on a few KB of generated
text, and that text as TorchTitan's local `c4_test` dataset) are made here: nothing is downloaded.
Arguments after `--` go to TorchTitan unchanged.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

VOCAB = 512  # the debug model's embedding has 2,048 rows
WORDS = (
    "the a one two three model device tensor graph program step loss learns runs on fast small "
    "large compiles fuses data batch token layer head attention weight gradient update every "
    "each and or with from into over under before after while when"
).split()


def make_assets(root: Path) -> tuple[Path, Path]:
    """A tokenizer (tokenizer.json, tokenizer_config.json) and a JSON-lines text dataset."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text_dir, tok_dir = root / "c4_test", root / "tokenizer"
    text_dir.mkdir(parents=True, exist_ok=True)
    tok_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120))) for _ in range(64)]
    with open(text_dir / "c4.json", "w") as f:
        for line in lines:
            f.write(json.dumps({"text": line}) + "\n")
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(lines, trainer)
    tokenizer.save(str(tok_dir / "tokenizer.json"))
    config = {"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True}
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(config))
    return tok_dir, text_dir


def torchtitan_command(args, tok_dir: Path, text_dir: Path, dump: Path) -> list[str]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={args.nproc}",
        str(Path(__file__).with_name("train.py")),  # torchtitan.train, see there
        "--module", "llama3", "--config", "llama3_debugmodel",
        "--hf_assets_path", str(tok_dir),
        "--dataloader.dataset_path", str(text_dir),
        "--dump_folder", str(dump),
        "--training.steps", str(args.steps),
        "--training.seq_len", str(args.seq_len),
        "--training.local_batch_size", str(args.batch),
        "--metrics.log_freq", "1",
    ]  # fmt: skip
    if args.nproc > 1:
        # TorchTitan's default SPMD backend (spmd_types) hands torch 2.13's fully_shard plain
        # parameters that it refuses ("all parameters must be DTensors"), on every device:
        # the DTensor backend is the one this torch supports.
        command += ["--parallelism.spmd-backend", "partial_dtensor"]
    if args.mode == "compile":
        command.append("--compile.enable")
    return command + args.torchtitan_args


def summarize(steps: list[dict]) -> dict:
    """Steady state from the third step on (the first two compile, and AdamW's state
    appears at the second)."""
    steady = steps[2:] or steps[-1:]
    deltas = [b["executions"] - a["executions"] for a, b in itertools.pairwise(steps)]
    last = steps[-1]["materializations"]
    before = steps[-2]["materializations"] if len(steps) > 1 else last
    return {
        "steps": len(steps),
        "first_step_seconds": round(steps[0]["seconds"], 1),
        "steps_per_second": round(1 / statistics.median(s["seconds"] for s in steady), 2),
        "executions_per_step": statistics.median(deltas[1:] or deltas or [0]),
        "programs_compiled": steps[-1]["compiles"],
        "compile_seconds": round(steps[-1]["compile_seconds"], 1),
        "programs_from_persistent_cache": steps[-1]["persistent_cache_hits"],
        # defer_and_fuse: why the pending graph ran in the last step ("host_read", ...)
        "materializations_last_step": {
            reason: n - before.get(reason, 0)
            for reason, n in last.items()
            if n != before.get(reason, 0)
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=1, help="processes (devices), FSDP2 over them")
    parser.add_argument(
        "--mode",
        choices=("eager", "compile", "defer_and_fuse"),
        default="eager",
        help="eager (strict), TorchTitan's --compile.enable, or defer_and_fuse (default: eager)",
    )
    parser.add_argument("--steps", type=int, default=10, help="training steps (default: 10)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample (default: 128)")
    parser.add_argument(
        "--batch", type=int, default=2, help="samples per process and step (default: 2)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("/tmp/torch_tpu_torchtitan"),
        help="assets and TorchTitan's outputs (default: /tmp/torch_tpu_torchtitan)",
    )
    parser.add_argument("torchtitan_args", nargs="*", help="after --: TorchTitan's own flags")
    args = parser.parse_args()
    tok_dir, text_dir = make_assets(args.workdir / "assets")
    env = dict(os.environ)
    env["TORCH_TPU_EAGER_MODE"] = "defer_and_fuse" if args.mode == "defer_and_fuse" else "strict"
    dump = args.workdir / f"outputs_{args.mode}_{args.nproc}"
    report = dump / "torch_tpu_steps.json"
    report.unlink(missing_ok=True)
    env["TORCH_TPU_STEP_REPORT"] = str(report)
    status = subprocess.call(torchtitan_command(args, tok_dir, text_dir, dump), env=env)
    if report.exists():
        summary = {
            "mode": args.mode,
            "processes": args.nproc,
            **summarize(json.loads(report.read_text())),
        }
        print("torch_tpu:", json.dumps(summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
