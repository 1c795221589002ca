"""Hugging Face ``transformers`` architectures on ``tpu`` against the CPU.

    python -m torch_tpu.tools.model_zoo [--jobs N] [--only a,b] [--sample] [--markdown PATH]

Each architecture is built from its config class, shrunk (two layers, narrow widths, a small
vocabulary), with random weights: nothing is downloaded. For each one the harness runs on
the CPU and on ``tpu`` (``Precision.HIGHEST``):

- Tier 1: the forward pass runs on ``tpu`` without error.
- Tier 2: the outputs match the CPU's, one training step gives the same loss and gradients,
  and for causal language models greedy ``generate()`` yields the same tokens.

Architectures whose CPU reference itself fails with the shrunk config are listed apart and
not counted: they measure the shrinking, not the backend. Every architecture runs in a worker
process, so a crash or a hang fails one row, not the run.

``--dynamism`` checks the decoders under bounded dynamism in eager instead: a forward pass
over each of 8 prompt lengths with the sequence dimension marked up to one bound
(``torch_tpu.mark_dynamic``), and greedy ``generate()`` from two marked prompt lengths, each
against the CPU; it counts the programs each further length compiles (each architecture in a
process of its own, so that programs of the ones before it do not count as its own).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Most specific first: an architecture is counted once, under the first family that lists it
# (BERT also has a causal-LM head, Whisper a decoder-only one).
FAMILIES = (
    ("encoder-decoder", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("audio", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("audio", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("audio", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
    ("vision", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("encoder", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("decoder", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
)

# The architectures CI runs (`tests/test_model_zoo.py`): one or more of each family.
SAMPLE = (
    "gpt2",
    "llama",
    "qwen2",
    "mistral",
    "bert",
    "roberta",
    "t5",
    "bart",
    "vit",
    "resnet",
    "wav2vec2",
    "whisper",
)

BATCH, SEQ, VOCAB, NEW_TOKENS = 2, 8, 1024, 5
# --dynamism: prompt lengths of the forward passes and of the two generate() calls, all
# marked dynamic up to DYNAMIC_BOUND.
DYNAMIC_LENGTHS, DYNAMIC_PROMPTS, DYNAMIC_BOUND = tuple(range(3, 11)), (5, 9), 32
FORWARD_RTOL, GRAD_RTOL, NORM_FLOOR = 1e-4, 1e-3, 1e-6
WORKER_TIMEOUT_S = 600


@dataclass
class Result:
    name: str
    family: str
    model_class: str = ""
    cpu_ok: bool = False
    tier1: bool = False
    forward_err: float | None = None
    loss_err: float | None = None
    grad_err: float | None = None
    generate_ok: bool | None = None
    tier2: bool = False
    fallbacks: dict[str, int] = field(default_factory=dict)  # ops run on the CPU instead
    # --dynamism: programs each forward length and each generate() call compiled.
    length_programs: list[int] = field(default_factory=list)
    generate_programs: list[int] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)


# --- Which architectures -------------------------------------------------------------------


def architectures() -> list[tuple[str, str, str]]:
    """(model_type, family, model class name) for each architecture, each listed once."""
    from transformers.models.auto import modeling_auto

    seen: dict[str, tuple[str, str, str]] = {}
    for family, mapping in FAMILIES:
        for model_type, class_name in getattr(modeling_auto, mapping).items():
            if isinstance(class_name, (tuple, list)):
                class_name = class_name[0]
            seen.setdefault(model_type, (model_type, family, class_name))
    return sorted(seen.values())


# --- Shrinking a config --------------------------------------------------------------------

TWO = {"num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers"}
TWO |= {"decoder_layers", "num_decoder_layers", "num_encoder_layers", "num_blocks"}
WIDTH = {"hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim"}
FFN = {"intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner"}
FFN |= {"shared_expert_intermediate_size", "dense_intermediate_size"}
HEADS = {"num_attention_heads", "n_head", "num_heads", "encoder_attention_heads"}
HEADS |= {"decoder_attention_heads", "n_heads"}
EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
FIXED = {
    "head_dim": 16,
    "d_kv": 16,
    "d_head": 16,
    "attention_head_dim": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "moe_intermediate_size": 64,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "image_size": 32,
    "max_source_positions": 32,
}


def _shrink_dict(d: dict) -> dict:
    heads = next((d[k] for k in HEADS if isinstance(d.get(k), int)), None)
    layer_counts: dict[int, int] = {}  # original layer count -> shrunk
    for key, value in list(d.items()):
        if isinstance(value, bool):
            continue
        if isinstance(value, dict) and "model_type" in value:
            d[key] = _shrink_dict(value)
        elif key in TWO and isinstance(value, int) and value > 2:
            d[key] = layer_counts[value] = 2
        elif key in WIDTH and isinstance(value, int) and value > 64:
            d[key] = 64 if "depths" not in d else 32
        elif key in FFN and isinstance(value, int) and value > 128:
            d[key] = 128
        elif key in HEADS and isinstance(value, int) and value > 4:
            d[key] = 4
        elif key in HEADS and isinstance(value, list):
            d[key] = [2] * len(value)
        elif key == "num_key_value_heads" and isinstance(value, int):
            d[key] = 4 if value == heads else 2
        elif key in EXPERTS and isinstance(value, int) and value > 4:
            d[key] = 4
        elif key in FIXED and isinstance(value, int) and value > FIXED[key]:
            d[key] = FIXED[key]
        elif key == "image_size" and isinstance(value, list) and len(value) == 2:
            d[key] = [32, 32]
        elif key == "patch_size" and isinstance(value, int) and value > 8:
            d[key] = 8
        elif key == "depths" and isinstance(value, list):
            d[key] = [1] * len(value)
        elif key == "hidden_sizes" and isinstance(value, list):
            d[key] = [max(32, v // 16) for v in value]
        elif key in ("conv_dim", "tdnn_dim") and isinstance(value, list):
            d[key] = [32] * len(value)
        elif key.endswith("vocab_size") and isinstance(value, int) and value > VOCAB:
            d[key] = VOCAB
    # Per-layer lists (layer_types, mlp_layer_types, ...) and per-layer settings follow the
    # layer count, keeping one layer of each kind (hybrids need an attention layer).
    for key, value in list(d.items()):
        if "layer" in key and isinstance(value, list) and len(value) in layer_counts:
            d[key] = _keep_kinds(value, layer_counts[len(value)])
        elif "layer" in key and isinstance(value, dict) and value and layer_counts:
            d[key] = _last_layers(value, min(layer_counts.values()))
    # Backbone outputs name stages of the full depth; the defaults name the last one.
    for key in ("out_features", "out_indices"):
        if d.get(key) is not None and "stage_names" in d:
            d[key] = None
    if isinstance(d.get("qk_head_dim"), int) and "qk_nope_head_dim" in d:
        d["qk_head_dim"] = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    vocab = d.get("vocab_size")
    for key, value in list(d.items()):
        if isinstance(vocab, int) and key.endswith(("_token_id", "_token_index")):
            if isinstance(value, int) and value >= vocab:
                d[key] = vocab - 1
            elif isinstance(value, list):
                d[key] = [min(v, vocab - 1) for v in value if isinstance(v, int)]
    return d


def _keep_kinds(values: list, n: int) -> list:
    """n entries holding one of each distinct (hashable) kind, as many as fit: the leading
    entries, then each kind once in order of first appearance."""
    try:
        kinds = list(dict.fromkeys(values))
    except TypeError:
        return values[:n]
    return values[: n - min(len(kinds), n)] + kinds[:n]


def _last_layers(per_layer: dict, n: int) -> dict:
    """Settings keyed by layer index: the first ones, moved onto the last n layers."""
    try:
        keys = sorted(per_layer, key=int)[:n]
    except (TypeError, ValueError):
        return per_layer
    return {type(k)(n - len(keys) + i): per_layer[k] for i, k in enumerate(keys)}


def shrunk_config(model_type: str):
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    shrunk = type(config).from_dict(_shrink_dict(config.to_dict()))
    # Released checkpoints set these; some default configs leave them out, and the
    # sequence-to-sequence heads need them to shift labels into decoder inputs.
    for owner in (shrunk, getattr(shrunk, "decoder", None)):
        if owner is not None and getattr(owner, "is_encoder_decoder", False):
            if getattr(owner, "pad_token_id", None) is None:
                owner.pad_token_id = 0
            if getattr(owner, "decoder_start_token_id", None) is None:
                owner.decoder_start_token_id = owner.pad_token_id
    return shrunk


# --- Inputs --------------------------------------------------------------------------------


def _text_config(config):
    return getattr(config, "text_config", None) or config


def make_inputs(family: str, model, config, generator) -> dict:
    import inspect

    import torch

    params = inspect.signature(model.forward).parameters
    vocab = getattr(_text_config(config), "vocab_size", None) or VOCAB
    ids = lambda *shape: torch.randint(4, max(5, vocab), shape, generator=generator)
    inputs: dict = {}
    if family in ("decoder", "encoder", "encoder-decoder"):
        inputs["input_ids"] = ids(BATCH, SEQ)
        if "attention_mask" in params:
            inputs["attention_mask"] = torch.ones(BATCH, SEQ, dtype=torch.long)
        if family == "encoder-decoder" and getattr(config, "is_encoder_decoder", False):
            inputs["labels"] = ids(BATCH, SEQ - 2)
        else:
            inputs["labels"] = inputs["input_ids"].clone()
    elif family == "vision":
        size = getattr(config, "image_size", 32)
        size = size if isinstance(size, (list, tuple)) else (size, size)
        channels = getattr(config, "num_channels", 3)
        inputs["pixel_values"] = torch.randn(BATCH, channels, *size[-2:], generator=generator)
        inputs["labels"] = torch.randint(0, config.num_labels, (BATCH,), generator=generator)
    elif family == "audio":
        if "input_features" in params:
            mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80)
            frames = 2 * getattr(config, "max_source_positions", 32)
            inputs["input_features"] = torch.randn(BATCH, mels, frames, generator=generator)
        else:
            inputs["input_values"] = torch.randn(BATCH, 4000, generator=generator)
        if "decoder_input_ids" in params:
            inputs["labels"] = ids(BATCH, 4)
        elif type(model).__name__.endswith("ForCTC"):
            inputs["labels"] = torch.randint(1, max(2, vocab), (BATCH, 3), generator=generator)
        else:
            inputs["labels"] = torch.randint(0, config.num_labels, (BATCH,), generator=generator)
    return inputs


# --- Comparing -----------------------------------------------------------------------------


def _float_leaves(value, out):
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            out.append(value)
    elif isinstance(value, dict) or hasattr(value, "to_tuple"):
        for v in value.values():
            _float_leaves(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _float_leaves(v, out)
    return out


def relative_error(tpu, cpu) -> float:
    """Norm-wise: ||tpu - cpu|| / ||cpu||, over every floating-point tensor of the output.
    Norms below NORM_FLOOR count as that: some shrunk models' outputs or gradients vanish
    (EfficientNet's, MobileViT's are ~1e-13), where the rounding noise is all there is."""
    import torch

    a, b = _float_leaves(tpu, []), _float_leaves(cpu, [])
    if len(a) != len(b):
        return math.inf
    num = den = 0.0
    for x, y in zip(a, b):
        x, y = x.detach().cpu().double(), y.detach().double()
        if x.shape != y.shape:
            return math.inf
        finite = torch.isfinite(y)
        if not torch.equal(finite, torch.isfinite(x)):
            return math.inf
        num += float((x[finite] - y[finite]).pow(2).sum())
        den += float(y[finite].pow(2).sum())
    return math.sqrt(num) / max(math.sqrt(den), NORM_FLOOR)


# --- One architecture ----------------------------------------------------------------------


def _model_class(class_name: str):
    import transformers

    return getattr(transformers, class_name)


def _to(inputs: dict, device) -> dict:
    return {k: v.to(device) for k, v in inputs.items()}


def _randomize_zero_matrices(model):
    """Some architectures initialise a weight matrix to zeros (MoE routers, some heads):
    every router score then ties, and which experts a top-k picks among equal scores is
    unspecified (the CPU and XLA break ties differently). Random weights there too."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2 and param.is_floating_point() and not param.any():
                param.copy_(0.02 * torch.randn(param.shape, generator=generator))
    return model


def _models(model_type: str, class_name: str):
    """The shrunk config, the CPU model (seeded random weights) and its copy for tpu."""
    import torch

    config = shrunk_config(model_type)
    torch.manual_seed(0)
    cpu_model = _randomize_zero_matrices(_model_class(class_name)(config).eval())
    return config, cpu_model, copy.deepcopy(cpu_model)


def _step(model, inputs):
    out = model(**inputs)
    loss = out.loss if getattr(out, "loss", None) is not None else out[0].float().pow(2).mean()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return out, loss.detach(), grads


def run_architecture(model_type: str, family: str, class_name: str) -> Result:
    from torch_tpu.precision import precision

    with precision("HIGHEST"):
        return _run_architecture(model_type, family, class_name)


def _run_architecture(model_type: str, family: str, class_name: str) -> Result:
    import torch

    import torch_tpu

    result = Result(model_type, family, class_name)
    start = time.perf_counter()
    try:
        config, cpu_model, tpu_model = _models(model_type, class_name)
        inputs = make_inputs(family, cpu_model, config, torch.Generator().manual_seed(0))
        cpu_out, cpu_loss, cpu_grads = _step(cpu_model, inputs)
    except Exception as e:  # the reference fails: not counted
        result.error = f"CPU reference: {type(e).__name__}: {_first_line(e)}"
        result.seconds = time.perf_counter() - start
        return result
    result.cpu_ok = True
    before = dict(torch_tpu.metrics()["fallbacks"])
    try:
        tpu_model.to("tpu")
        tpu_out, tpu_loss, tpu_grads = _step(tpu_model, _to(inputs, "tpu"))
        torch.tpu.synchronize()
        result.tier1 = True
        result.forward_err = relative_error(tpu_out, cpu_out)
        result.loss_err = relative_error(tpu_loss, cpu_loss)
        result.grad_err = relative_error(tpu_grads, cpu_grads)
        if family == "decoder":
            result.generate_ok = _same_generation(cpu_model, tpu_model, inputs, result.notes)
        result.tier2 = (
            result.forward_err <= FORWARD_RTOL
            and result.loss_err <= FORWARD_RTOL
            and result.grad_err <= GRAD_RTOL
            and result.generate_ok is not False
        )
        if not result.tier2:
            result.error = _mismatch(result)
    except Exception as e:
        result.error = f"{type(e).__name__}: {_first_line(e)}"
        if os.environ.get("MODEL_ZOO_TRACEBACK"):
            traceback.print_exc()
    after = torch_tpu.metrics()["fallbacks"]
    result.fallbacks = {
        op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)
    }
    result.seconds = time.perf_counter() - start
    return result


def _programs() -> int:
    import torch_tpu

    m = torch_tpu.metrics()
    return m["compiles"] + m["persistent_cache_hits"]


def _marked(t, device="tpu"):
    import torch_tpu

    t = t.to(device)
    torch_tpu.mark_dynamic(t, 1, 1, DYNAMIC_BOUND)
    return t


def run_dynamism(model_type: str, family: str, class_name: str) -> Result:
    """A decoder under bounded dynamism in eager: forward passes over DYNAMIC_LENGTHS and
    generate() from DYNAMIC_PROMPTS, the sequence marked dynamic, against the CPU."""
    import torch

    from torch_tpu.precision import precision

    result = Result(model_type, family, class_name)
    start = time.perf_counter()
    try:
        config, cpu_model, tpu_model = _models(model_type, class_name)
        vocab = getattr(_text_config(config), "vocab_size", None) or VOCAB
        generator = torch.Generator().manual_seed(0)
        prompts = {
            n: torch.randint(4, max(5, vocab), (BATCH, n), generator=generator)
            for n in DYNAMIC_LENGTHS + DYNAMIC_PROMPTS
        }
        with torch.no_grad():
            expected = {
                n: cpu_model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
                for n, ids in prompts.items()
                if n in DYNAMIC_LENGTHS
            }
    except Exception as e:  # the reference fails: not counted
        result.error = f"CPU reference: {type(e).__name__}: {_first_line(e)}"
        result.seconds = time.perf_counter() - start
        return result
    result.cpu_ok = True
    try:
        tpu_model.to("tpu")
        worst = 0.0
        with precision("HIGHEST"), torch.no_grad():
            for n in DYNAMIC_LENGTHS:
                ids = prompts[n]
                before = _programs()
                logits = tpu_model(
                    input_ids=_marked(ids), attention_mask=_marked(torch.ones_like(ids))
                ).logits.cpu()
                result.length_programs.append(_programs() - before)
                worst = max(worst, relative_error(logits, expected[n]))
            result.tier1 = True
            result.forward_err = worst
            same = []
            kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
            for n in DYNAMIC_PROMPTS:
                ids = prompts[n]
                want = cpu_model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
                before = _programs()
                got = tpu_model.generate(
                    _marked(ids), attention_mask=_marked(torch.ones_like(ids)), **kwargs
                )
                same.append(torch.equal(got.cpu(), want))
                result.generate_programs.append(_programs() - before)
        result.generate_ok = all(same)
        result.tier2 = worst <= FORWARD_RTOL and result.generate_ok
        if not result.tier2:
            result.error = "; ".join(
                [f"outputs differ (rel {worst:.1e})"] * (worst > FORWARD_RTOL)
                + ["generate() tokens differ"] * (not result.generate_ok)
            )
    except Exception as e:
        result.error = f"{type(e).__name__}: {_first_line(e)}"
        if os.environ.get("MODEL_ZOO_TRACEBACK"):
            traceback.print_exc()
    result.seconds = time.perf_counter() - start
    return result


def _same_generation(cpu_model, tpu_model, inputs, notes: list[str]) -> bool | None:
    """Greedy decoding on both devices gives the same tokens; None when the CPU's fails."""
    import torch

    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False, min_new_tokens=NEW_TOKENS)
    ids = inputs["input_ids"]
    prompt = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        try:
            want = cpu_model.generate(**prompt, **kwargs)
        except Exception as e:
            notes.append(
                f"generate() not compared, CPU reference: {type(e).__name__}: {_first_line(e)}"
            )
            return None
        got = tpu_model.generate(**_to(prompt, "tpu"), **kwargs).cpu()
    return torch.equal(want, got)


def _mismatch(r: Result) -> str:
    parts = []
    if r.forward_err > FORWARD_RTOL:
        parts.append(f"outputs differ (rel {r.forward_err:.1e})")
    if r.loss_err > FORWARD_RTOL:
        parts.append(f"loss differs (rel {r.loss_err:.1e})")
    if r.grad_err > GRAD_RTOL:
        parts.append(f"gradients differ (rel {r.grad_err:.1e})")
    if r.generate_ok is False:
        parts.append("generate() tokens differ")
    return "; ".join(parts)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:300]


# --- Workers -------------------------------------------------------------------------------


def worker(names: list[str], outdir: Path) -> None:
    import warnings

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    table = {name: (name, family, cls) for name, family, cls in architectures()}
    run = run_architecture
    if os.environ.get("MODEL_ZOO_DYNAMISM"):
        # One architecture per process: its programs are counted from an empty program
        # cache, not after those of the architectures before it.
        run, names = run_dynamism, names[:1]
    for name in names:
        result = run(*table[name])
        (outdir / f"{name}.json").write_text(json.dumps(asdict(result)))


def run_all(entries: list[tuple[str, str, str]], jobs: int, dynamism: bool = False) -> list[Result]:
    families = {name: family for name, family, _ in entries}
    pending = [name for name, _, _ in entries]
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        outdir = Path(tmp)
        running = {}  # worker -> (its remaining names, shard index, time of its last result)

        def launch(todo, index):
            if not todo:
                return
            cmd = [sys.executable, "-m", "torch_tpu.tools.model_zoo", "--worker", str(outdir)]
            env = dict(os.environ)
            if dynamism:
                env["MODEL_ZOO_DYNAMISM"] = "1"
            if jobs > 1:  # the CPU platform only: each worker holds a device of its own
                env["TORCH_TPU_LOCK_DIR"] = str(outdir / f"lock{index}")
                os.makedirs(env["TORCH_TPU_LOCK_DIR"], exist_ok=True)
            proc = subprocess.Popen(
                cmd + todo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
            )
            running[proc] = (todo, index, time.monotonic())

        for index in range(jobs):
            launch(pending[index::jobs], index)
        while running:
            time.sleep(0.5)
            for proc, (todo, index, last) in list(running.items()):
                done = [n for n in todo if (outdir / f"{n}.json").exists()]
                for name in done:
                    results[name] = Result(**json.loads((outdir / f"{name}.json").read_text()))
                    _print_row(results[name])
                todo = [n for n in todo if n not in done]
                last = time.monotonic() if done else last
                running[proc] = (todo, index, last)
                hung = time.monotonic() - last > WORKER_TIMEOUT_S
                if proc.poll() is None and not hung:
                    continue
                if hung:
                    proc.kill()
                    proc.wait()
                del running[proc]
                if todo and dynamism and proc.returncode == 0:
                    launch(todo, index)  # the next architecture, in a fresh worker
                elif todo:  # the worker stopped inside todo[0]: that row fails, the rest go on
                    why = f"worker hung for {WORKER_TIMEOUT_S} s" if hung else None
                    why = why or f"worker died (exit code {proc.returncode})"
                    results[todo[0]] = Result(todo[0], families[todo[0]], cpu_ok=True, error=why)
                    _print_row(results[todo[0]])
                    launch(todo[1:], index)
    return [results[name] for name, _, _ in entries if name in results]


# --- Report --------------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def _print_row(r: Result) -> None:
    status = "ok" if r.tier2 else ("T1" if r.tier1 else ("skip" if not r.cpu_ok else "FAIL"))
    if r.length_programs or r.generate_programs:
        print(
            f"{r.name:32s} {status:5s} fwd {_fmt(r.forward_err):8s} programs per length "
            f"{r.length_programs} per generate() {r.generate_programs} "
            f"{r.seconds:6.1f}s  {r.error[:120]}",
            flush=True,
        )
        return
    print(
        f"{r.name:32s} {r.family:16s} {status:5s} fwd {_fmt(r.forward_err):8s} "
        f"grad {_fmt(r.grad_err):8s} fallbacks {sum(r.fallbacks.values()):3d} "
        f"{r.seconds:6.1f}s  {r.error[:120]}",
        flush=True,
    )


def _fallback_text(r: Result) -> str:
    return (
        ", ".join(f"{op.removeprefix('aten::')} x{n}" for op, n in sorted(r.fallbacks.items()))
        or "-"
    )


def summary(results: list[Result]) -> str:
    counted = [r for r in results if r.cpu_ok]
    n = len(counted)
    t1 = sum(r.tier1 for r in counted)
    t2 = sum(r.tier2 for r in counted)
    pct = lambda k: 100.0 * k / n if n else 0.0
    native = sum(r.tier1 and not r.fallbacks for r in counted)
    return (
        f"model zoo: {n} architectures, Tier 1 {t1}/{n} ({pct(t1):.1f}%), "
        f"Tier 2 {t2}/{n} ({pct(t2):.1f}%), {native} with no CPU fallback; "
        f"{len(results) - n} not counted (CPU reference fails)"
    )


def dynamism_summary(results: list[Result]) -> str:
    counted = [r for r in results if r.cpu_ok]
    ok = [r for r in counted if r.tier2]
    quiet = [r for r in ok if sum(r.length_programs[1:]) == 0]
    return (
        f"bounded dynamism: {len(ok)}/{len(counted)} decoders give the CPU's outputs over "
        f"{len(DYNAMIC_LENGTHS)} marked lengths and its generate() tokens from "
        f"{len(DYNAMIC_PROMPTS)} prompt lengths; {len(quiet)} of them compile nothing after "
        f"the first length; {len(results) - len(counted)} not counted (CPU reference fails)"
    )


def _not_counted(results: list[Result]) -> list[str]:
    skipped = [r for r in results if not r.cpu_ok]
    if not skipped:
        return []
    lines = ["", "## Not counted: the CPU reference fails with the shrunk config", ""]
    return lines + [f"- {r.name} ({r.family}): {r.error.replace('|', '/')}" for r in skipped]


def dynamism_markdown(results: list[Result], seconds: float) -> str:
    import torch
    import transformers

    counted = [r for r in results if r.cpu_ok]
    further = [sum(r.length_programs[1:]) for r in counted if r.tier2]
    lines = [
        "# Model zoo under bounded dynamism",
        "",
        "Generated by `python -m torch_tpu.tools.model_zoo --dynamism --markdown "
        f"docs/model_zoo_dynamism.md` (transformers {transformers.__version__}, torch "
        f"{torch.__version__}, {seconds / 60:.0f} min), strict eager, `Precision.HIGHEST`. "
        f"Each decoder runs a forward pass at prompt lengths {DYNAMIC_LENGTHS[0]} to "
        f"{DYNAMIC_LENGTHS[-1]} with the sequence dimension marked dynamic up to "
        f"{DYNAMIC_BOUND} (`torch_tpu.mark_dynamic`) and greedy `generate()` of {NEW_TOKENS} "
        f"tokens from marked prompts of lengths {DYNAMIC_PROMPTS[0]} and {DYNAMIC_PROMPTS[1]}, "
        "each against the CPU.",
        "",
        f"**{dynamism_summary(results)}**",
        "",
        f"Programs compiled over the {len(DYNAMIC_LENGTHS) - 1} lengths after the first, "
        f"correct decoders: median {statistics.median(further) if further else 0:g}, "
        f"total {sum(further)}.",
        "",
        "| architecture | class | correct | outputs | programs at the first length "
        "| programs at the later lengths | programs per generate() | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in counted:
        first, later = (r.length_programs[:1] or ["-"])[0], r.length_programs[1:]
        lines.append(
            f"| {r.name} | {r.model_class} | {'yes' if r.tier2 else 'no'} | "
            f"{_fmt(r.forward_err)} | {first} | {', '.join(map(str, later)) or '-'} | "
            f"{', '.join(map(str, r.generate_programs)) or '-'} | {r.error.replace('|', '/')} |"
        )
    return "\n".join(lines + _not_counted(results)) + "\n"


def markdown(results: list[Result], seconds: float) -> str:
    import torch
    import transformers

    counted = [r for r in results if r.cpu_ok]
    lines = [
        "# Model zoo",
        "",
        "Generated by `python -m torch_tpu.tools.model_zoo --markdown docs/model_zoo.md` "
        f"(transformers {transformers.__version__}, torch {torch.__version__}, "
        f"{seconds / 60:.0f} min). Shrunk configs, random weights, `Precision.HIGHEST`.",
        "",
        f"**{summary(results)}**",
        "",
        "Tier 1: forward runs on `tpu`. Tier 2: outputs (norm-wise relative error "
        f"<= {FORWARD_RTOL:g}), loss and gradients (<= {GRAD_RTOL:g}) match the CPU, and "
        "greedy `generate()` gives the same tokens (decoders).",
        "",
        "| architecture | family | class | Tier 1 | Tier 2 | outputs | gradients | generate "
        "| CPU fallbacks | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in counted:
        gen = "-" if r.generate_ok is None else ("same" if r.generate_ok else "differs")
        lines.append(
            f"| {r.name} | {r.family} | {r.model_class} | {'yes' if r.tier1 else 'no'} | "
            f"{'yes' if r.tier2 else 'no'} | {_fmt(r.forward_err)} | {_fmt(r.grad_err)} | "
            f"{gen} | {_fallback_text(r)} | "
            f"{'; '.join([r.error, *r.notes]).strip('; ').replace('|', '/')} |"
        )
    return "\n".join(lines + _not_counted(results)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--jobs", type=int, help="worker processes (CPU platform only; default: one per core)"
    )
    parser.add_argument("--only", help="comma-separated model types, e.g. gpt2,t5 (default: all)")
    parser.add_argument("--sample", action="store_true", help="the CI sample only")
    parser.add_argument("--markdown", help="write the table to this file")
    parser.add_argument(
        "--dynamism",
        action="store_true",
        help="the decoders under bounded dynamism in eager (marked prompt lengths)",
    )
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[1:], Path(args.worker[0]))
        return 0
    entries = architectures()
    wanted = SAMPLE if args.sample else (args.only.split(",") if args.only else None)
    if wanted:
        entries = [e for e in entries if e[0] in wanted]
    if args.dynamism:
        entries = [e for e in entries if e[1] == "decoder"]
    start = time.perf_counter()
    import torch_tpu

    cpu_platform = torch_tpu.platform() == "cpu"
    jobs = (args.jobs or os.cpu_count() or 1) if cpu_platform else 1
    results = run_all(entries, max(1, jobs), dynamism=args.dynamism)
    if args.dynamism:
        print(dynamism_summary(results))
        if args.markdown:
            Path(args.markdown).write_text(dynamism_markdown(results, time.perf_counter() - start))
        return 0
    print(summary(results))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
