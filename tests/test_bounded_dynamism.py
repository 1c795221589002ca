"""Bounded dynamism: torch.compile(backend="tpu", options={"bounded_dynamism": True}) runs a
graph whose sizes have upper bounds (torch_tpu.mark_dynamic) as one program at the bounds,
and its results match the CPU at every size."""

import warnings

import pytest
import torch
import torch.nn as nn

import torch_tpu

BOUNDED = {"bounded_dynamism": True}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    with torch.tpu.precision("highest"):
        yield
    torch._dynamo.reset()


def programs() -> int:
    """Programs compiled or loaded from the persistent cache so far."""
    m = torch_tpu.metrics()
    return m["compiles"] + m["persistent_cache_hits"]


def marked(t: torch.Tensor, dim: int = 1, low: int = 2, high: int = 64) -> torch.Tensor:
    t = t.to("tpu")
    torch_tpu.mark_dynamic(t, dim, low, high)
    return t


def run_lengths(model_cpu, model_tpu, make_input, lengths, options=BOUNDED):
    """Compiled tpu model over inputs of each length: (programs made by the forward calls,
    worst absolute error against the CPU)."""
    compiled = torch.compile(model_tpu, backend="tpu", options=options)
    made, worst = 0, 0.0
    with torch.no_grad():
        for n in lengths:
            x = make_input(n)
            before = programs()
            out = compiled(marked(x))
            made += programs() - before
            expected = model_cpu(x)
            for ours, theirs in zip(_tensors(out), _tensors(expected)):
                assert ours.shape == theirs.shape
                worst = max(worst, (ours.cpu() - theirs).abs().max().item())
    return made, worst


def _tensors(out) -> list:
    out = out.logits if hasattr(out, "logits") else out
    return list(out) if isinstance(out, (tuple, list)) else [out]


def pair(make):
    torch.manual_seed(0)
    cpu = make().eval()
    tpu = make().to("tpu").eval()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


def tokens(vocab):
    g = torch.Generator().manual_seed(1)
    return lambda n: torch.randint(0, vocab, (1, n), generator=g)


def test_causal_lm_over_30_prompt_lengths_compiles_at_most_2_programs():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=101, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    config.bos_token_id = config.eos_token_id = 0
    cpu, tpu = pair(lambda: GPT2LMHeadModel(config))
    made, worst = run_lengths(cpu, tpu, tokens(101), range(2, 32))
    assert made <= 2
    assert worst < 1e-4


class MeanPool(nn.Module):
    """Not causal: every output reads the whole sequence, so padding that XLA did not
    mask would change every result."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, idx):
        h = torch.tanh(self.proj(self.emb(idx)))
        scores = torch.softmax(h @ h.transpose(1, 2), dim=-1)  # over the padded length
        return (scores @ h).mean(dim=1), h.amax(dim=1), h.sum(dim=1)


def test_reductions_and_products_over_the_varying_dimension_are_masked():
    cpu, tpu = pair(MeanPool)
    compiled = torch.compile(tpu, backend="tpu", options=BOUNDED)
    made = 0
    with torch.no_grad():
        for n in (3, 9, 17, 40):
            x = tokens(50)(n)
            before = programs()
            outs = compiled(marked(x))
            made += programs() - before
            for ours, expected in zip(outs, cpu(x)):
                torch.testing.assert_close(ours.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert made == 1


def test_without_the_option_the_inputs_bounds_carry_the_graph():
    # mark_dynamic alone: Dynamo's graph is symbolic, and each size is recorded anew
    # from the marked inputs, at their bounds (eager bounded dynamism): one program.
    cpu, tpu = pair(MeanPool)
    made, worst = run_lengths(cpu, tpu, tokens(50), (3, 5, 7), options=None)
    assert made == 1
    assert worst < 1e-5


class LastPosition(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, idx):
        return self.emb(idx)[:, -1] * 2  # counts from the end of the varying dimension


def test_a_graph_that_reads_from_the_end_is_not_rewritten_and_warns():
    # The rewrite at the bounds refuses it; recorded from the marked inputs, its
    # position from the end is an offset operand of the one program.
    cpu, tpu = pair(LastPosition)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made, worst = run_lengths(cpu, tpu, tokens(50), (3, 6))
    assert worst == 0
    assert made == 1
    assert any("one program per size" in str(w.message) for w in caught)


class TwoRows(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.proj = nn.Linear(8, 4)

    def forward(self, idx):
        return self.proj(self.emb(idx))  # [2, n, 8] -> [2 * n, 8] for the product


def test_a_reshape_that_merges_the_varying_dimension_runs_per_size():
    cpu, tpu = pair(TwoRows)
    g = torch.Generator().manual_seed(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, worst = run_lengths(
            cpu, tpu, lambda n: torch.randint(0, 50, (2, n), generator=g), (3, 6)
        )
    assert worst < 1e-5
    assert any("merges or splits" in str(w.message) for w in caught)


def test_mark_dynamic_validates_and_reports_its_bounds():
    x = torch.zeros(2, 10, device="tpu")
    torch_tpu.mark_dynamic(x, -1, 2, 32)
    (info,) = torch_tpu.get_dynamism_info(x)
    assert (info.dimension, info.lower_bound, info.upper_bound) == (1, 2, 32)
    with pytest.raises(ValueError, match="outside its bounds"):
        torch_tpu.mark_dynamic(x, 0, 4, 8)
    with pytest.raises(IndexError, match="out of range"):
        torch_tpu.mark_dynamic(x, 2, 1, 8)
    assert torch_tpu.get_dynamism_info(torch.zeros(3)) == ()


def test_set_dimension_size_masks_a_fused_reduction():
    x = torch.arange(8.0, device="tpu")
    size = torch.tensor(3, dtype=torch.int32, device="tpu")
    with torch_tpu.eager_mode("defer_and_fuse"):
        total = torch.ops.torch_tpu.set_dimension_size(x, 0, size).sum()
        assert total.item() == 0 + 1 + 2
    cpu = torch.ops.torch_tpu.set_dimension_size(torch.arange(8.0), 0, torch.tensor(3))
    assert torch.equal(cpu, torch.arange(8.0))


def test_sizes_without_an_upper_bound_compile_per_size_with_a_warning():
    cpu, tpu = pair(MeanPool)
    compiled = torch.compile(tpu, backend="tpu", options=BOUNDED)
    x = tokens(50)(5)
    t = x.to("tpu")
    torch._dynamo.mark_dynamic(t, 1)  # no max
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = compiled(t)
    torch.testing.assert_close(out[0].cpu(), cpu(x)[0], rtol=1e-5, atol=1e-5)
    assert any("no upper bound" in str(w.message) for w in caught)


def test_training_graphs_with_bounded_sizes_still_match_the_cpu():
    cpu, tpu = pair(MeanPool)
    tpu.train()
    compiled = torch.compile(tpu, backend="tpu", options=BOUNDED)
    for n in (4, 7):
        x = tokens(50)(n)
        loss = sum(o.sum() for o in compiled(marked(x)))
        loss.backward()
        expected = sum(o.sum() for o in cpu(x))
        expected.backward()
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
