"""``transformers.Trainer`` trains on tpu with unchanged ``TrainingArguments``: the model and
the batches land on tpu, the loss is finite and falls, and no op falls back to the CPU.

Uses the data, tokenizer and model builders of ``examples/hf_trainer.py`` (nothing is
downloaded)."""

import importlib.util
import math
import pathlib

import pytest
import torch

import torch_tpu

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("tokenizers")

STEPS = 10
BATCH = 16
MAX_LENGTH = 16


def load_example():
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "hf_trainer.py"
    spec = importlib.util.spec_from_file_location("hf_trainer_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def training_arguments(tmp_path, **changes):
    return transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH,
        learning_rate=5e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
        **changes,
    )


class CompileCounter(transformers.TrainerCallback):
    def __init__(self):
        self.compiles = {}  # step -> programs compiled so far

    def on_step_end(self, args, state, control, **kwargs):
        self.compiles[state.global_step] = torch_tpu.metrics()["compiles"]


def test_trainer_runs_on_tpu(tmp_path, no_fallback):
    ex = load_example()
    # One fixed batch, seen at every step: within 10 steps the model starts to fit it.
    texts, labels = ex.make_data(BATCH, seed=0)
    tokenizer = ex.build_tokenizer(texts)
    train_ds = ex.TextDataset(tokenizer, texts, labels, MAX_LENGTH)
    eval_ds = ex.TextDataset(tokenizer, *ex.make_data(BATCH, seed=1), MAX_LENGTH)
    torch.manual_seed(0)
    model = ex.build_model(tokenizer.vocab_size, MAX_LENGTH)

    received = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: received.append(kwargs["input_ids"].device),
        with_kwargs=True,
    )

    args = training_arguments(tmp_path, max_steps=STEPS, per_device_eval_batch_size=BATCH)
    assert args.device.type == "tpu"
    counter = CompileCounter()
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        compute_metrics=ex.accuracy,
        callbacks=[counter],
    )
    assert trainer.accelerator.device.type == "tpu"
    batch = next(iter(trainer.get_train_dataloader()))
    assert {v.device.type for v in batch.values()} == {"tpu"}

    trainer.train()
    metrics = trainer.evaluate()

    assert {p.device.type for p in trainer.model.parameters()} == {"tpu"}
    assert len(received) >= STEPS
    assert {d.type for d in received} == {"tpu"}
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.02, losses
    # The first steps compile; then the programs are reused although the scheduled
    # learning rate changes at every step.
    assert counter.compiles[STEPS] == counter.compiles[STEPS // 2], counter.compiles
    assert math.isfinite(metrics["eval_loss"])
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0


@pytest.mark.parametrize("examples", [1, 50, 127, 128, 129, 200, 512, 1000])
def test_example_eval_batches_cover_small_and_uneven_eval_sets(examples):
    # The example's loaders drop the last partial batch: a batch larger than the eval set
    # left none, and the Trainer then reported no eval_accuracy (KeyError).
    batch = load_example().eval_batch_size(examples)
    full_batches = examples // batch
    assert 1 <= batch <= 128 and full_batches >= 1
    assert examples % batch < full_batches  # fewer dropped than batches: evenly split


def test_trainer_with_torch_compile_trains(tmp_path):
    # TrainingArguments(torch_compile=True): the compiled model's loss is scaled in place
    # (`loss *= ...`) at every step; that failed at step 3 when a replay's outputs were views.
    ex = load_example()
    texts, labels = ex.make_data(BATCH, seed=0)
    tokenizer = ex.build_tokenizer(texts)
    train_ds = ex.TextDataset(tokenizer, texts, labels, MAX_LENGTH)
    torch.manual_seed(0)
    model = ex.build_model(tokenizer.vocab_size, MAX_LENGTH)
    torch._dynamo.reset()
    args = training_arguments(
        tmp_path, max_steps=6, torch_compile=True, gradient_accumulation_steps=2
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train_ds)
    try:
        trainer.train()
    finally:
        torch._dynamo.reset()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0], losses
