"""Bounded dynamism in eager execution: a tensor marked with torch_tpu.mark_dynamic(t, dim,
min, max) lives in a storage sized for its bounds, ops on it run programs computed at the
bounds (one for every size) and their results carry the bounds on. Each case runs over
several sizes inside one bound: results equal the CPU's, and no size after the first
compiles a program. The suite runs in every eager mode."""

from __future__ import annotations

import copy
import itertools
import math
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from torch_tpu import _C

BOUND = 16
SIZES = [5, 9, 16, 3, 12]


@pytest.fixture(autouse=True)
def highest_precision():
    with torch.tpu.precision("highest"):
        yield


def programs() -> int:
    m = torch_tpu.metrics()
    return m["compiles"] + m["persistent_cache_hits"]


def marked(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    t = x.to("tpu")
    torch_tpu.mark_dynamic(t, dim, 1, BOUND)
    return t


def _tree(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_sizes(fn, make, sizes=SIZES, dim=1):
    """fn over tpu inputs made by make(n) (the first marked along `dim`, the others
    copied) against the CPU; returns the programs each size after the first made."""
    made = []
    for n in sizes:
        args = make(n)
        tpu_args = [marked(args[0], dim)] + [a.to("tpu") for a in args[1:]]
        before = programs()
        got = [t.cpu() for t in _tree(fn(*tpu_args))]
        made.append(programs() - before)
        want = _tree(fn(*args))
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    return made[1:]


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


W = randn(8, 6, seed=1)

CASES = {
    "elementwise chain": (lambda x: (x * 2 + 1).sin().clamp(-0.5, 0.7), lambda n: [randn(2, n, 8)]),
    "sum over the varying dim": (lambda x: x.sum(1), lambda n: [randn(2, n, 8)]),
    "sum across it": (lambda x: x.sum(-1), lambda n: [randn(2, n, 8)]),
    "mean and var over it": (lambda x: (x.mean(1), x.var(1)), lambda n: [randn(2, n, 8)]),
    "amax and argmax over it": (lambda x: (x.amax(1), x.argmax(1)), lambda n: [randn(2, n, 8)]),
    "softmax over it": (lambda x: x.softmax(1), lambda n: [randn(2, n, 8)]),
    "softmax across it": (lambda x: x.log_softmax(-1), lambda n: [randn(2, n, 8)]),
    "layer norm": (lambda x: F.layer_norm(x, (8,)), lambda n: [randn(2, n, 8)]),
    "matmul with the varying rows": (lambda x, w: x @ w, lambda n: [randn(n, 8), W], 0),
    "matmul contracting it": (lambda x: x.t() @ x, lambda n: [randn(n, 8)], 0),
    "attention": (
        lambda x: (x @ x.transpose(1, 2) / 8**0.5).softmax(-1) @ x,
        lambda n: [randn(1, n, 8)],
    ),
    "embedding": (
        lambda i, w: F.embedding(i, w).sum(-1),
        lambda n: [torch.randint(0, 8, (1, n), generator=torch.Generator().manual_seed(n)), W],
    ),
    "cat along a static dim": (lambda x: torch.cat([x, x * 2], -1), lambda n: [randn(2, n, 8)]),
    "cumulative sum and product along and across it": (
        lambda x: (x.cumsum(1), (x * 0.1 + 1).cumprod(-1)),
        lambda n: [randn(2, n, 8)],
    ),
    "position ids from an attention mask": (  # transformers' generate()
        lambda m: (m.long().cumsum(-1) - 1).masked_fill_(m == 0, 1),
        lambda n: [(torch.arange(n) % 3 != 0).long().expand(2, n).contiguous()],
    ),
    "where and a comparison": (
        lambda x: torch.where(x > 0, x, x.exp()).masked_fill(x < -1, 3.0),
        lambda n: [randn(2, n, 8)],
    ),
    # A linear layer as AOTAutograd's graphs have it: the batch merged with the varying
    # dimension, the product, the split back, a slice of the features (chunk).
    "merged, multiplied, split back and sliced": (
        lambda x, w: (x.view(-1, 8) @ w).view(x.shape[0], -1, 6)[..., 2:5].sum(1),
        lambda n: [randn(3, n, 8), W],
    ),
    "a product contracting the merged dimension (a weight's gradient)": (
        lambda x: x.reshape(-1, 8).t() @ (x * 2).reshape(-1, 8),
        lambda n: [randn(3, n, 8)],
    ),
    "an empty slice of a split view beside the rest (Phi-3's rotary pass-through)": (
        lambda x, w: (lambda y: torch.cat([y * 2, y[..., 6:]], -1))(
            (x.view(-1, 8) @ w).view(x.shape[0], -1, 6)
        ),
        lambda n: [randn(3, n, 8), W],
    ),
    "merged with a varying outer dimension": (
        lambda x: (x.reshape(-1, 8) @ W.to(x.device)).reshape(-1, 4, 6).softmax(0),
        lambda n: [randn(n, 4, 8)],
        0,
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=str)
def test_an_op_at_the_bounds_matches_the_cpu_and_compiles_once(case):
    fn, make, *dim = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op may fall back to per-size programs
        assert check_sizes(fn, make, dim=dim[0] if dim else 1) == [0] * (len(SIZES) - 1)


class TinyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids):
        h = self.norm(self.emb(ids))
        q = self.proj(h)
        a = (q @ h.transpose(1, 2) / 8**0.5).softmax(-1) @ h
        return (a * h).sum()


def test_forward_and_backward_at_the_bounds_match_the_cpu():
    torch.manual_seed(0)
    cpu = TinyDecoder()
    tpu = TinyDecoder().to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    made = []
    for n in SIZES:
        ids = torch.randint(0, 50, (1, n), generator=torch.Generator().manual_seed(n))
        for m in (cpu, tpu):
            m.zero_grad()
        before = programs()
        loss = tpu(marked(ids))
        loss.backward()
        grads = [p.grad.cpu() for p in tpu.parameters()]
        made.append(programs() - before)
        expected = cpu(ids)
        expected.backward()
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
        for g, p in zip(grads, cpu.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    assert made[1:] == [0] * (len(SIZES) - 1)


def test_results_carry_the_bounds_and_read_back_exactly():
    x = randn(2, 5, 8)
    t = marked(x)
    y = t * 3 - 1
    assert _C._has_bounds(t) and _C._has_bounds(y)
    assert y.shape == (2, 5, 8) and y.is_contiguous()
    expected = x * 3 - 1
    torch.testing.assert_close(y.cpu(), expected)
    assert y.sum().item() == pytest.approx(expected.sum().item(), rel=1e-5)
    assert repr(y[1, :2].cpu()) == repr(expected[1, :2]) and "device='tpu:0'" in repr(y)
    torch.testing.assert_close(y.max(1).values.cpu(), expected.max(1).values)


def test_mark_dynamic_keeps_the_values_and_the_tensor():
    x = randn(3, 7)
    t = x.to("tpu").requires_grad_()
    torch_tpu.mark_dynamic(t, 1, 2, BOUND)
    assert t.is_leaf and t.requires_grad and t.shape == (3, 7)
    torch.testing.assert_close(t.detach().cpu(), x)
    (t * t).sum().backward()
    torch.testing.assert_close(t.grad.cpu(), 2 * x)


def test_an_op_that_cannot_run_at_the_bounds_runs_per_size_with_a_warning():
    # flip reads the varying dimension from its end, where the padding is: it runs at
    # its operand's own sizes, correctly.
    with pytest.warns(
        UserWarning, match="aten::flip on tpu compiles a program for each length"
    ) as caught:
        made = check_sizes(lambda x: torch.flip(x, [1]) * 2, lambda n: [randn(2, n, 8)])
    assert all(m >= 1 for m in made)
    # Once, at the user's line, with no path inside the backend.
    (warning,) = [w for w in caught if "on tpu compiles" in str(w.message)]
    assert warning.filename == __file__ and "Triggered internally" not in str(warning.message)


PER_SIZE_THROUGH_TORCH_OPS = """
import torch, torch_tpu
for n in (3, 5, 7):
    x = torch.randn(2, n, 8)
    t = x.to("tpu")
    torch_tpu.mark_dynamic(t, 1, 1, 16)
    # torch.ops (as graph modules call ops) has no Python warning handler: c10's own
    # takes the warning.
    got = torch.ops.aten.flip.default(t, [1]).cpu()
    torch.testing.assert_close(got, x.flip(1))
print("ok")
"""


def test_the_per_size_warning_under_c10s_own_handler():
    # It threw std::logic_error (a null file in the location) from the op.
    import subprocess
    import sys
    import tempfile

    # A process of its own (the warning is given once a process): its own device lock.
    env = dict(os.environ, TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="per_size_warning_"))
    out = subprocess.run(
        [sys.executable, "-c", PER_SIZE_THROUGH_TORCH_OPS], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "aten::flip on tpu compiles a program for each length" in out.stderr


def test_cat_along_the_varying_dimension_keeps_one_bound():
    # Its result's bound is the first power of two its operands fit in at their offsets
    # (32 here for every size): operands after a varying one are placed at run time.
    made = check_sizes(
        lambda x, y: torch.cat([x, y, x * 2], 1).softmax(1),
        lambda n: [randn(2, n, 8), randn(2, 3, 8)],
        sizes=[5, 9, 3, 12],
    )
    assert made == [0, 0, 0]


def grow(steps, automatic=True):
    """A key-value cache grown token by token (as transformers' DynamicCache does) and
    attention over it: programs made per step, checked against the CPU."""
    _C._set_automatic_bounds(automatic)
    try:
        gen = torch.Generator().manual_seed(0)
        cache = torch.randn(1, 2, 5, 8, generator=gen)
        ids = torch.randint(0, 50, (1, 5), generator=gen)
        cache_t, ids_t = cache.to("tpu"), ids.to("tpu")
        made = []
        for _ in range(steps):
            new, q = torch.randn(1, 2, 1, 8, generator=gen), torch.randn(1, 2, 1, 8, generator=gen)
            before = programs()
            cache_t = torch.cat([cache_t, new.to("tpu")], dim=-2)
            out_t = (q.to("tpu") @ cache_t.transpose(-1, -2)).softmax(-1) @ cache_t
            ids_t = torch.cat([ids_t, out_t.sum(-1)[..., 0].argmax(-1, keepdim=True)], dim=-1)
            last = ids_t[:, -1].cpu()
            made.append(programs() - before)
            cache = torch.cat([cache, new], dim=-2)
            out = (q @ cache.transpose(-1, -2)).softmax(-1) @ cache
            ids = torch.cat([ids, out.sum(-1)[..., 0].argmax(-1, keepdim=True)], dim=-1)
            torch.testing.assert_close(out_t.cpu(), out, rtol=1e-5, atol=1e-5)
            assert torch.equal(ids_t.cpu(), ids) and torch.equal(last, ids[:, -1])
        assert _C._has_bounds(cache_t) == automatic
        return made
    finally:
        _C._set_automatic_bounds(True)


def test_a_tensor_grown_by_cat_gets_bounds_and_steps_stop_compiling():
    # The second growth makes the results bounded (a power of two, at least 64): from
    # then on a step compiles nothing until the cache outgrows 64.
    made = grow(16)
    assert sum(made[3:]) == 0, made
    assert sum(made) < sum(grow(16, automatic=False)) / 2


def test_a_view_merging_the_varying_dimension_keeps_it():
    # The storage holds the valid entries first in row-major order: [2, n, 8] and its
    # [2 * n, 8] view hold them alike, so the view varies with bound 2 * 16.
    made = check_sizes(lambda x: x.reshape(-1, 8) * 2, lambda n: [randn(2, n, 8)])
    assert made == [0] * (len(SIZES) - 1)


def test_a_write_at_its_own_sizes_into_a_split_view_keeps_the_bounds():
    # Falcon's `mlp_output += attention_output` with the attention output of static
    # size: the write runs per size, and the [3, n, 6] view is all of the stored
    # [3 * n, 6] product's valid entries, so the storage keeps its bounds.
    x, s = randn(3, 5, 8), randn(3, 5, 6, seed=2)
    y = (marked(x).view(-1, 8) @ W.to("tpu")).view(3, 5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # add_ runs per size (warned once a process)
        y.add_(s.to("tpu"))
    assert _C._has_bounds(y)
    torch.testing.assert_close(
        (y * 2).sum(1).cpu(), ((x.view(-1, 8) @ W).view(3, 5, 6) + s).mul(2).sum(1)
    )


def test_a_split_that_cannot_tell_its_varying_dimension_runs_per_size():
    # [n * 4] split as [n, 4] is clear (only n can hold the bound 16 * 4); split as
    # [2, 2 * n] it is not (either could), and the op runs at the sizes (warned at the
    # second).
    with pytest.warns(UserWarning, match="aten::mul on tpu compiles a program for each length"):
        for n in (8, 6):
            x = randn(2, n, 4)
            t = x.to("tpu")
            torch_tpu.mark_dynamic(t, 1, 1, 2 * n)
            got = (t.view(2, 2, 2 * n) * 2).cpu()
            torch.testing.assert_close(got, x.view(2, 2, 2 * n) * 2)


def test_linear_layers_over_a_batch_keep_the_varying_dimension():
    # PyTorch's linear and matmul fold [batch, n, features] into [batch * n, features],
    # a view whose bound is batch * 16, and split the product back.
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    tpu = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = check_sizes(
            lambda x, w: (tpu if x.device.type == "tpu" else cpu)(x) @ w,
            lambda n: [randn(3, n, 8), W],
        )
    assert made == [0] * (len(SIZES) - 1)


def rotary_and_causal_attention(x):
    # What a decoder makes from the sequence length, a Python int: position ids
    # (arange), their angles, and SDPA's causal mask (ones(n, n).tril() inside).
    n = x.shape[1]
    pos = torch.arange(0, n, device=x.device).float()
    angles = pos[:, None] * torch.linspace(0.1, 1.0, 8, device=x.device)
    q = x * angles.cos() + x.tanh() * angles.sin()
    full = torch.full((x.shape[0], n), 0.5, device=x.device)
    out = F.scaled_dot_product_attention(q[:, None], x[:, None], x[:, None], is_causal=True)
    return out[:, 0] * full[..., None]


def test_factories_at_a_varying_size_take_its_bound():
    # arange(n), full((b, n)) and SDPA's ones(n, n) are made from the int n: with
    # automatic bounds they take the bound of the varying dimension of size n, so the
    # ops that meet them run at the bounds too.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = check_sizes(rotary_and_causal_attention, lambda n: [randn(2, n, 8)])
    assert made == [0] * (len(SIZES) - 1)
    x = marked(randn(2, 5, 8))
    assert _C._has_bounds(torch.arange(5, device="tpu"))
    assert not _C._has_bounds(torch.arange(7, device="tpu"))  # no dimension varies at 7
    assert torch.equal(torch.ones(3, 5, device="tpu").cpu(), torch.ones(3, 5))
    del x  # no dimension varies at 5 any more
    assert not _C._has_bounds(torch.arange(5, device="tpu"))


@pytest.mark.parametrize(
    "op",
    [
        lambda v: torch.repeat_interleave(v, 2, dim=1),  # clone of an expanded view
        lambda v: v.clone(),
        lambda v: v * 2,
        lambda v: v.sum(1),
        lambda v: torch.cat([v, v], 1),
        lambda v: v.index_select(1, torch.tensor([], dtype=torch.int64, device=v.device)),
        lambda v: v.sum(0),
    ],
    ids=["repeat_interleave", "clone", "mul", "sum", "cat", "index_select", "sum_of_empty"],
)
def test_empty_views_of_bounded_tensors_run_at_their_sizes(op):
    # ones(3, 5, 4) takes the bounds of live varying dimensions of sizes 3 and 5; its
    # empty views have nothing to read at the bounds (XLA refused the gather such a
    # program made, from an operand dimension of size 0) and run at their sizes,
    # without the per-size warning.
    varying = [marked(randn(2, 3, 8)), marked(randn(2, 5, 8))]
    base = torch.ones(3, 5, 4, device="tpu")
    assert _C._has_bounds(base)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for view in (base[:0], base[:, :0], base[:, :, :0]):
            got, want = op(view), op(view.cpu())
            assert got.shape == want.shape and torch.equal(got.cpu(), want)
    del varying


def test_a_position_inside_the_varying_dimension_is_copied_at_its_sizes():
    # generate()'s logits[:, -1].to(copy=True, dtype=float32): no dimension of the view
    # varies, so the copy is an ordinary one.
    x = randn(2, 5, 8)
    got = (marked(x) * 2)[:, -1].to(copy=True, dtype=torch.float64)
    torch.testing.assert_close(got.cpu(), (x * 2)[:, -1].double())


@pytest.mark.parametrize("varying", [[0], [1], [0, 1]], ids=str)
def test_pointwise_ops_on_permuted_views_keep_the_values(varying):
    # A result laid out like a permuted operand is transposed to its storage's order
    # dimension by dimension: XLA compacts the valid entries of a reshape that merges a
    # sized dimension with another.
    x = torch.arange(5 * 7 * 3, dtype=torch.float32).view(5, 7, 3)
    for perm in itertools.permutations(range(3)):
        t = x.to("tpu")
        for d in varying:
            torch_tpu.mark_dynamic(t, d, 1, BOUND)
        assert torch.equal((t.permute(*perm) * 2).cpu(), x.permute(*perm) * 2), perm


def test_operands_that_do_not_fit_at_the_bounds_run_per_size():
    # embedding's backward meets a static gradient and indices made with the bound of a
    # live varying size; its meta kernel does not compare them, the lowering does.
    keep = marked(randn(2, 6, 3))
    w_cpu = randn(32, 4).requires_grad_()
    w_tpu = w_cpu.detach().to("tpu").requires_grad_()
    scale = randn(6, 6, 4, seed=2)
    for w, device in ((w_cpu, "cpu"), (w_tpu, "tpu")):
        ids = (
            torch.arange(6, device=device)[None, :] - torch.arange(6, device=device)[:, None]
        ).abs()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (F.embedding(ids, w) * scale.to(device)).sum().backward()
    torch.testing.assert_close(w_tpu.grad.cpu(), w_cpu.grad)
    assert keep.shape == (2, 6, 3)


def test_factories_stay_static_with_automatic_bounds_off():
    marked(randn(2, 5, 8))
    _C._set_automatic_bounds(False)
    try:
        assert not _C._has_bounds(torch.arange(5, device="tpu"))
        assert not _C._has_bounds(torch.zeros(5, device="tpu"))
    finally:
        _C._set_automatic_bounds(True)


def test_a_compiled_function_runs_at_the_bounds():
    compiled = torch.compile(lambda x: (x.softmax(-1) * 2).sum(1), backend="tpu")
    made = []
    for n in SIZES:
        x = randn(2, n, 8)
        before = programs()
        torch.testing.assert_close(compiled(marked(x)).cpu(), (x.softmax(-1) * 2).sum(1))
        made.append(programs() - before)
    assert made[1:] == [0] * (len(SIZES) - 1)


class TinyEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 8)
        self.qkv = nn.Linear(8, 24)
        self.norm = nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, ids):
        h = self.emb(ids)
        q, k, v = self.qkv(self.norm(h)).chunk(3, dim=-1)
        h = h + F.scaled_dot_product_attention(q, k, v)
        return h + self.mlp(h)


@pytest.mark.parametrize("loss_of", ["sum", "mean"])
@pytest.mark.parametrize("batch", [2, 3])
def test_compiled_training_over_varying_lengths_compiles_once(loss_of, batch):
    # AOTAutograd's forward and backward graphs take the sizes as symbols; each length
    # is recorded anew, but at the bounds, into the programs of the first. A batch of
    # 3 meets the length 3: the batch's size matches a live varying one (mean's
    # gradient is stretched along both), so there the ops read it at its size, with
    # programs of their own.
    torch.manual_seed(0)
    cpu, tpu = TinyEncoder(), TinyEncoder().to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    compiled = torch.compile(tpu, backend="tpu")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, tpu)]
    made = []
    for n in SIZES:
        ids = torch.randint(0, 32, (batch, n), generator=torch.Generator().manual_seed(n))
        before = programs()
        for model, opt, x in ((compiled, opts[1], marked(ids)), (cpu, opts[0], ids)):
            opt.zero_grad()
            out = model(x).square()
            loss = out.mean() if loss_of == "mean" else out.sum() / out.numel()
            loss.backward()
            opt.step()
            if x.device.type == "tpu":
                got = loss.item()
                made.append(programs() - before)
        assert got == pytest.approx(loss.item(), rel=1e-5)
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)
    coincide = [n == batch for n in SIZES[1:]]
    assert [m for m, c in zip(made[1:], coincide) if not c] == [0] * coincide.count(False)


def test_generate_with_the_default_dynamic_cache_stops_compiling_per_token():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(config).eval()
    tpu = transformers.LlamaForCausalLM(config).eval().to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    made = []

    class CountPrograms(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            made.append(programs())
            return scores

    prompt = torch.randint(0, 128, (1, 7), generator=torch.Generator().manual_seed(7))
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tpu.generate(
            prompt.to("tpu"),
            logits_processor=transformers.LogitsProcessorList([CountPrograms()]),
            **kwargs,
        )
    assert torch.equal(out.cpu(), cpu.generate(prompt, **kwargs))
    per_token = [b - a for a, b in itertools.pairwise(made)]
    # Past the first four tokens nothing compiles: the cache (7 + 32 tokens) stays
    # within its first bound, 64.
    assert sum(per_token[4:]) == 0, per_token


class PositionalEncoding(nn.Module):
    """pytorch/examples word_language_model's: a fixed table sliced to the input's length."""

    def __init__(self, width, max_len=500):
        super().__init__()
        position = torch.arange(max_len).float().unsqueeze(1)
        div = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))
        pe = torch.zeros(max_len, width)
        pe[:, 0::2] = torch.sin(position * div)
        pe[:, 1::2] = torch.cos(position * div)
        self.register_buffer("pe", pe.unsqueeze(1))

    def forward(self, x):
        return x + self.pe[: x.size(0), :]


class WordModel(nn.Module):
    def __init__(self, tokens=50, width=16):
        super().__init__()
        self.width = width
        self.embed = nn.Embedding(tokens, width)
        self.position = PositionalEncoding(width)
        layer = nn.TransformerEncoderLayer(width, 2, 32, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.decode = nn.Linear(width, tokens)

    def forward(self, src):
        x = self.position(self.embed(src) * math.sqrt(self.width))
        return torch.log_softmax(self.decode(self.encoder(x)), dim=-1)


def test_a_generation_loop_growing_by_one_token_compiles_a_few_programs():
    # word_language_model's generate.py: the input grows by `cat` at each step and the
    # positional table is sliced to its length (`pe[:x.size(0)]`), which compiled a
    # program per length (1,612 for 100 words). The slice is read at the input's bound.
    torch.manual_seed(0)
    cpu = WordModel().eval()
    model = copy.deepcopy(cpu).to("tpu")
    g = torch.Generator().manual_seed(1)
    words = torch.randint(50, (1, 1))
    tokens = words.to("tpu")
    made = []  # programs compiled at each step
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(100):
            before = programs()
            weights = model(tokens)[-1].squeeze().exp().cpu()
            word = torch.multinomial(weights, 1, generator=g)[0]
            tokens = torch.cat([tokens, torch.tensor([[int(word)]], device="tpu")], 0)
            made.append(programs() - before)
    assert not [str(w.message) for w in caught if "tpu" in str(w.message)]
    # Lengths 1 and 2 run at their sizes, the cat of length 3 takes a bound (64); then
    # only the steps where the input outgrows it (to 128) compile.
    compiling = [step for step, n in enumerate(made) if n]
    assert set(compiling) <= {0, 1, 2, 3, 63, 64, 65}, made
    if os.environ.get("TORCH_TPU_EAGER_MODE") == "defer_and_fuse":
        assert sum(made) <= 8, made
    with torch.no_grad():
        torch.testing.assert_close(model(tokens).cpu(), cpu(tokens.cpu()), rtol=1e-4, atol=1e-4)


def test_indexing_a_varying_dimension_runs_at_the_bounds():
    # nanoGPT's `x[:, [-1], :]`: a negative index counts from the valid size, which the
    # program reads as it runs, so one program serves every length.
    made = check_sizes(
        lambda x, i: (x[:, [-1], :], x[:, i], x[i.abs() % 2]),
        lambda n: [randn(2, n, 8), longs(0, -2)],
    )
    assert made == [0] * len(made), made


def longs(*values):
    return torch.tensor(values)


def test_windows_of_a_varying_dimension_run_at_their_size():
    # nanoGPT's sampling crops the growing sequence to its block (`idx[:, -block:]`),
    # a slice of one size over stored sizes that change: after two sizes it is read at
    # its own size from an offset the program takes as an operand (it compiled two
    # programs per token once the sequence outgrew the block).
    made = check_sizes(
        lambda x: (x[:, -4:] * 2, x[:, :4].sum(1), x[:, 2:6].exp(), x[:, 1:] * x[:, :-1]),
        lambda n: [randn(2, n, 3)],
        sizes=[6, 9, 16, 7, 12],
    )
    assert made[1:] == [0] * len(made[1:]), made


class CroppedModel(nn.Module):
    def __init__(self, tokens=40, block=8, width=16):
        super().__init__()
        self.block = block
        self.embed, self.position = nn.Embedding(tokens, width), nn.Embedding(block, width)
        self.mix = nn.Linear(width, width)
        self.decode = nn.Linear(width, tokens)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.embed(idx) + self.position(pos)
        return self.decode(torch.tanh(self.mix(x)).cumsum(1))


def test_sampling_past_the_block_size_stops_compiling():
    # nanoGPT's sample.py: `idx if idx.size(1) <= block else idx[:, -block:]`, the
    # next token appended by cat.
    torch.manual_seed(0)
    cpu = CroppedModel().eval()
    model = copy.deepcopy(cpu).to("tpu")

    def sample(m, idx, made):
        for _ in range(30):
            before = programs()
            crop = idx if idx.size(1) <= m.block else idx[:, -m.block :]
            token = m(crop)[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, token], 1)
            made.append(programs() - before)
        return idx

    made = []
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = sample(model, torch.zeros(1, 1, dtype=torch.long, device="tpu"), made)
        want = sample(cpu, torch.zeros(1, 1, dtype=torch.long), [])
    assert not [str(w.message) for w in caught if "tpu" in str(w.message)]
    assert torch.equal(got.cpu(), want)
    # Lengths 1 and 2 at their sizes, then the bound 64; the first crop follows the
    # stored length, the second is known as a window: nothing compiles after it.
    assert made[11:] == [0] * len(made[11:]), made


@pytest.mark.parametrize("index", [7, -8])
def test_an_index_past_the_valid_size_raises_the_cpus_error(index):
    # 7 is inside the bound (16) but past the size (5): the check uses the valid size.
    x = randn(2, 5, 3)
    with pytest.raises(IndexError) as cpu:
        x[:, [index]]
    t = marked(x)
    with pytest.raises(IndexError) as tpu:
        t[:, torch.tensor([index], device="tpu")].cpu()
    assert str(cpu.value) in str(tpu.value)


def test_slices_shorter_than_a_varying_dimension_run_at_the_bounds():
    # torch.diff (transformers' packed-sequence check in every generate() step) subtracts
    # narrow(d, 1, n - 1) from narrow(d, 0, n - 1): each is read at the bound, one shorter.
    made = check_sizes(
        lambda x: (torch.diff(x, dim=1), x[:, 1:] * x[:, :-1], x[:, 1:].sum(1)),
        lambda n: [randn(2, n, 3)],
    )
    assert made == [0] * len(made), made
