"""Fine-tunes a small BERT classifier with ``transformers.Trainer`` on the ``tpu`` device.

Nothing is downloaded: the model is built from a shrunk ``BertConfig`` (2 layers, hidden 64)
with random weights, the tokenizer is a word-level ``tokenizers`` model trained here on the
generated text, and the task is synthetic but learnable: short "reviews" made of word lists,
labelled positive or negative by their sentiment word, with "not" flipping it and "A but B"
decided by B.

No device code is needed. Once torch_tpu is loaded (``import torch`` does it),
``torch.accelerator.current_accelerator()`` is ``tpu``; transformers' ``TrainingArguments``
(``_setup_devices``: ``is_torch_tpu_available()``) then picks ``tpu:0`` and accelerate's
``PartialState`` (``get_torch_accelerator_backend()``) picks ``tpu``, as they pick ``cuda``.
So ``TrainingArguments`` and ``Trainer`` are used unchanged: ``Trainer`` moves the model to
``tpu:0`` and its accelerate-prepared data loaders move every batch there.
``TrainingArguments(use_cpu=True)`` trains on the CPU instead; ``bf16=True`` (``--bf16``)
runs the forward under ``torch.autocast("tpu", torch.bfloat16)``.

Every batch is padded to the same length so the tpu compiles each program once; the
learning-rate schedule changes a runtime operand of the fused AdamW program, not the program.

Prints the device of the model and of the batches the model receives, the training loss,
the eval accuracy, the Trainer's throughput and the backend's compile/fallback counters.

    python examples/hf_trainer.py [--steps 300] [--batch 32] [--bf16]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default: 300)")
    parser.add_argument(
        "--batch", type=int, default=32, help="per-device train batch size (default: 32)"
    )
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default: 1e-3)")
    parser.add_argument(
        "--train-size", type=int, default=2000, help="training examples (default: 2000)"
    )
    parser.add_argument(
        "--eval-size",
        type=int,
        default=512,
        help="eval examples, in batches of up to 128 of one size (default: 512)",
    )
    parser.add_argument(
        "--max-length", type=int, default=24, help="padded sequence length (default: 24)"
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=20,
        help="logging_steps: steps between losses (default: 20)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of data and model (default: 0)")
    parser.add_argument("--bf16", action="store_true", help="TrainingArguments(bf16=True)")
    args = parser.parse_args()
    # Every batch has the same shape (the last partial one is dropped): at least one.
    if args.train_size < args.batch or args.eval_size < 1:
        parser.error("--train-size must be at least --batch, and --eval-size at least 1")
    return args


# --help answers before the imports below (torch, transformers), which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    PreTrainedTokenizerFast,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import torch_tpu

POSITIVE = ["great", "good", "wonderful", "excellent", "lovely", "brilliant", "fun", "superb"]
NEGATIVE = ["bad", "awful", "terrible", "boring", "dull", "poor", "horrible", "weak"]
SUBJECTS = ["the movie", "this film", "the plot", "the acting", "the music", "the ending"]
VERBS = ["was", "is", "seemed", "felt", "looked"]
ADVERBS = ["", "", "really", "quite", "very", "rather"]
FILLERS = ["", "", "", "overall", "honestly", "i think", "to me"]


def clause(rng: random.Random, positive: bool) -> list[str]:
    """ "the plot was (not) (really) <word>", saying ``positive``; "not" flips the word."""
    negated = rng.random() < 0.3
    word = rng.choice(POSITIVE if positive != negated else NEGATIVE)
    words = [rng.choice(SUBJECTS), rng.choice(VERBS), "not" if negated else ""]
    return [*words, rng.choice(ADVERBS), word]


def make_sentence(rng: random.Random) -> tuple[str, int]:
    """One synthetic review and its label (1: positive). Word counts alone do not decide it:
    "not" flips a clause, and in "A but B" the second clause B decides (A says the opposite)."""
    label = rng.randrange(2)
    words = [rng.choice(FILLERS)]
    if rng.random() < 0.4:
        words += [*clause(rng, not label), "but"]
    words += clause(rng, bool(label))
    return " ".join(w for w in words if w), label


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer trained on ``texts`` with the ``tokenizers`` library."""
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )


class TextDataset(torch.utils.data.Dataset):
    """Pre-tokenised examples, padded to one fixed length: every batch has the same shapes,
    so the tpu compiles each program once (dynamic padding would compile per length)."""

    def __init__(self, tokenizer, texts: list[str], labels: list[int], max_length: int):
        enc = tokenizer(
            [f"[CLS] {t} [SEP]" for t in texts],
            padding="max_length",
            max_length=max_length,
            truncation=True,
            return_tensors="pt",
        )
        self.input_ids = enc["input_ids"]
        self.attention_mask = enc["attention_mask"]
        self.labels = torch.tensor(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids[i],
            "attention_mask": self.attention_mask[i],
            "labels": self.labels[i],
        }


def make_data(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    pairs = [make_sentence(rng) for _ in range(n)]
    return [t for t, _ in pairs], [y for _, y in pairs]


def build_model(vocab_size: int, max_length: int) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=max_length,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def eval_batch_size(examples: int, largest: int = 128) -> int:
    """At most `largest`, splitting `examples` as evenly as it can: the loader drops the
    last partial batch (every batch the same shape), and with no batch at all the Trainer
    reports no accuracy."""
    batches = -(-examples // largest)  # rounded up
    return examples // batches


def accuracy(eval_pred) -> dict[str, float]:
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


class LossPrinter(TrainerCallback):
    """Prints each logged training loss as it comes, and times the steps between the first
    and the last log: the steady state, after the first steps have compiled their programs
    (a log reads the loss, so it waits for the queued steps)."""

    def __init__(self):
        self.logged = []  # (step, time, programs compiled so far)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            compiles = torch_tpu.metrics()["compiles"]
            self.logged.append((state.global_step, time.perf_counter(), compiles))
            print(f"step {state.global_step:4d}  loss {logs['loss']:.4f}", flush=True)

    def steady_state(self, batch: int) -> tuple[int, float, int] | None:
        """(first logged step, samples/s after it, programs compiled after it)."""
        if len(self.logged) < 2:
            return None
        (s0, t0, c0), (s1, t1, c1) = self.logged[0], self.logged[-1]
        return s0, (s1 - s0) * batch / (t1 - t0), c1 - c0


def main(args: argparse.Namespace) -> None:
    wall_start = time.perf_counter()
    print(
        f"platform: {torch_tpu.platform()} ({torch.tpu.get_device_name()}), "
        f"accelerator: {torch.accelerator.current_accelerator()}"
    )
    train_texts, train_labels = make_data(args.train_size, args.seed)
    eval_texts, eval_labels = make_data(args.eval_size, args.seed + 1)
    tokenizer = build_tokenizer(train_texts)
    train_ds = TextDataset(tokenizer, train_texts, train_labels, args.max_length)
    eval_ds = TextDataset(tokenizer, eval_texts, eval_labels, args.max_length)
    print(f"example: {train_texts[0]!r} -> label {train_labels[0]}")
    print(
        f"vocabulary: {tokenizer.vocab_size} words, {len(train_ds)} train / "
        f"{len(eval_ds)} eval examples"
    )

    torch.manual_seed(args.seed)
    model = build_model(tokenizer.vocab_size, args.max_length)

    # Records the device of what the model really receives from the Trainer.
    seen = {}

    def record_inputs(module, args_, kwargs):
        seen.setdefault("input_ids", kwargs["input_ids"].device)

    model.register_forward_pre_hook(record_inputs, with_kwargs=True)

    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=args.batch,
            per_device_eval_batch_size=eval_batch_size(args.eval_size),
            learning_rate=args.lr,
            warmup_steps=args.steps // 10,
            weight_decay=0.01,
            logging_steps=min(args.log_every, args.steps),
            save_strategy="no",
            eval_strategy="no",
            report_to="none",
            seed=args.seed,
            disable_tqdm=True,
            dataloader_drop_last=True,  # every batch the same shape
            bf16=args.bf16,
        )
        print(f"TrainingArguments.device: {training_args.device}")
        if training_args.device.type != "tpu":
            raise SystemExit(
                "transformers/accelerate did not select the tpu: this needs releases that pick "
                "the current torch.accelerator (tested: transformers 5.24.0, accelerate 1.16.0)"
            )
        printer = LossPrinter()
        trainer = Trainer(
            model=model,
            args=training_args,
            train_dataset=train_ds,
            eval_dataset=eval_ds,
            compute_metrics=accuracy,
            callbacks=[printer],
        )
        trainer.remove_callback(PrinterCallback)  # LossPrinter prints the losses instead
        before = trainer.evaluate()
        print(f"eval accuracy before training: {before['eval_accuracy']:.3f}")
        train_metrics = trainer.train().metrics
        after = trainer.evaluate()

    param_devices = sorted({str(p.device) for p in trainer.model.parameters()})
    print(f"model parameters on: {', '.join(param_devices)}")
    print(f"batches received on: {seen['input_ids']}")
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"training loss: first {losses[0]:.4f} -> last {losses[-1]:.4f}")
    print(
        f"eval accuracy: {after['eval_accuracy']:.3f} (chance 0.5), eval loss {after['eval_loss']:.4f}"
    )
    print(
        f"throughput (Trainer metrics): train {train_metrics['train_samples_per_second']:.1f} "
        f"samples/s ({train_metrics['train_steps_per_second']:.2f} steps/s, compilation "
        f"included), eval {after['eval_samples_per_second']:.1f} samples/s"
    )
    steady = printer.steady_state(args.batch)
    if steady is not None:
        first, samples_per_second, compiles = steady
        print(
            f"throughput after step {first}: {samples_per_second:.1f} samples/s "
            f"({compiles} programs compiled after step {first})"
        )
    m = torch_tpu.metrics()
    fallbacks = m["fallbacks"]
    print(
        f"torch_tpu: {m['compiles']} compiles ({m['compile_seconds']:.1f} s), "
        f"{m['cache_hits']} cache hits, {m['executions']} executions, "
        f"CPU fallbacks: {dict(fallbacks) if fallbacks else 'none'}"
    )
    print(f"wall time: {time.perf_counter() - wall_start:.1f} s")


if __name__ == "__main__":
    main(ARGS)
