"""torch.compile(backend="tpu"): one program per graph, replayed; results match CPU."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu
from tests.test_training import cnn, mlp


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def all_captured():
    """Fails the test if a compiled graph had to run op by op."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    op_by_op = [str(w.message) for w in caught if "runs op by op" in str(w.message)]
    assert not op_by_op, op_by_op


class TinyTransformer(nn.Module):
    def __init__(self, vocab=64, width=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        seq = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=idx.device)
        x = self.emb(idx) + self.pos[:seq]
        return self.head(self.blocks(x, mask=mask, is_causal=True)).flatten(0, 1)


def data(kind, g):
    if kind == "mlp":
        return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
    if kind == "cnn":
        return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)
    idx = torch.randint(0, 64, (2, 16), generator=g)
    return idx, torch.randint(0, 64, (32,), generator=g)


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": TinyTransformer}


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("kind", list(MODELS))
def test_compiled_training_matches_cpu_and_eager(kind, no_fallback, all_captured):
    torch.manual_seed(0)
    cpu_model = MODELS[kind]()
    models = {"cpu": cpu_model}
    models["eager"] = copy.deepcopy(cpu_model).to("tpu")
    models["compiled"] = copy.deepcopy(cpu_model).to("tpu")
    # eps well above rounding noise: AdamW would turn the noise in gradients that
    # are zero in exact arithmetic (the attention's key bias) into full-size steps.
    opts = {
        name: torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3, capturable=name != "cpu")
        for name, m in models.items()
    }
    step = torch.compile(train_step, backend="tpu")
    g = torch.Generator().manual_seed(1)
    for i in range(4):
        x, y = data(kind, g)
        losses = {}
        for name, m in models.items():
            dev = "cpu" if name == "cpu" else "tpu"
            fn = step if name == "compiled" else train_step
            losses[name] = fn(m, opts[name], x.to(dev), y.to(dev)).item()
        assert losses["compiled"] == pytest.approx(losses["cpu"], rel=1e-4, abs=1e-5), (i, losses)
        assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-5, abs=1e-6), (i, losses)
    for name in ("eager", "compiled"):
        for p, q in zip(models[name].parameters(), cpu_model.parameters()):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-4)


def test_replay_runs_one_execution_per_graph_and_compiles_nothing(all_captured):
    torch.manual_seed(0)
    model = mlp().to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(train_step, backend="tpu")
    x, y = data("mlp", torch.Generator().manual_seed(0))
    x, y = x.to("tpu"), y.to("tpu")
    for _ in range(3):
        step(model, opt, x, y).item()
    before = torch_tpu.metrics()
    step(model, opt, x, y).item()
    after = torch_tpu.metrics()
    assert after["compiles"] == before["compiles"]
    # forward, backward and the optimizer step: a few programs, not one per op
    assert after["executions"] - before["executions"] <= 4


def test_compiled_optimizer_keeps_its_step_counters_on_tpu(all_captured):
    """Dynamo makes an optimizer of CUDA parameters capturable when it traces its first
    step (the `step` counters are made on the device); tpu's get the same. With the
    counters on the host the optimizer's graph ran op by op."""
    torch.manual_seed(0)
    cpu_model = mlp()
    model = copy.deepcopy(cpu_model).to("tpu")
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, eps=1e-3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3)
    step = torch.compile(train_step, backend="tpu")
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = data("mlp", g)
        before = torch_tpu.metrics()
        loss = step(model, opt, x.to("tpu"), y.to("tpu")).item()
        executions = torch_tpu.metrics()["executions"] - before["executions"]
        assert loss == pytest.approx(train_step(cpu_model, cpu_opt, x, y).item(), rel=1e-4)
    assert opt.param_groups[0]["capturable"]
    assert all(s["step"].device.type == "tpu" for s in opt.state.values())
    # forward, backward and optimizer graphs in one program (debug mode runs each alone)
    debug = torch_tpu.get_eager_mode() == torch_tpu.EagerMode.DEBUG
    assert executions == (3 if debug else 1)
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse", "debug"])
def test_a_compiled_training_step_launches_one_program(mode, all_captured):
    """The forward, backward and optimizer graphs of a compiled step (three graphs, the
    backward's seed between them) are appended to one pending graph: one program a step,
    compiled once, in strict and defer_and_fuse; debug runs each graph on its own (it
    runs every launch to completion). The same losses as the step run eagerly."""
    torch.manual_seed(0)
    model = TinyTransformer().to("tpu")
    eager_model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-3)
    eager_opt = torch.optim.AdamW(eager_model.parameters(), lr=1e-2, eps=1e-3, capturable=True)
    step = torch.compile(train_step, backend="tpu")
    g = torch.Generator().manual_seed(1)
    with torch_tpu.eager_mode(mode):
        for i in range(4):
            x, y = (t.to("tpu") for t in data("transformer", g))
            before = torch_tpu.metrics()
            loss = step(model, opt, x, y).item()
            after = torch_tpu.metrics()
            expected = train_step(eager_model, eager_opt, x, y).item()
            assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6), i
            if i >= 1:
                graphs = 3 if mode == "debug" else 1
                assert after["executions"] - before["executions"] == graphs, i
        # Steps with nothing read between them: each step's graphs are still one
        # program (the forward graph called again starts the next).
        x, y = (t.to("tpu") for t in data("transformer", g))
        for warm in (True, False):
            before = torch_tpu.metrics()
            losses = [step(model, opt, x, y) for _ in range(3)]
            values = [loss.item() for loss in losses]
            after = torch_tpu.metrics()
            expected = [train_step(eager_model, eager_opt, x, y).item() for _ in range(3)]
            assert values == pytest.approx(expected, rel=1e-5, abs=1e-6)
            if not warm and mode != "debug":
                assert after["executions"] - before["executions"] == 3
                assert after["compiles"] == before["compiles"]
                assert after["compiles"] == before["compiles"], i


def test_capturable_is_left_alone_for_cpu_parameters():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = data("mlp", torch.Generator().manual_seed(1))
    torch.compile(train_step, backend="eager")(model, opt, x, y)
    assert not opt.param_groups[0]["capturable"]
    assert all(s["step"].device.type == "cpu" for s in opt.state.values())


def test_inference_gradients_and_input_mutation():
    def fn(a, b):
        b.mul_(2)  # an input mutated in place
        return (a @ b).relu().sum(0), a.t()

    a = torch.randn(5, 3, requires_grad=True)
    b = torch.randn(3, 4)
    at = a.detach().to("tpu").requires_grad_()
    bt = b.to("tpu")
    cfn = torch.compile(fn, backend="tpu")
    for _ in range(2):  # capture, then replay
        expected, _ = fn(a, b)
        got, got_view = cfn(at, bt)
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(bt.cpu(), b)
        assert got_view.shape == (3, 5)
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(at.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)


def test_dropout_draws_like_eager():
    def fn(x):
        return F.dropout(x, 0.5, training=True) * 3

    x = torch.ones(64, 64, device="tpu")
    cfn = torch.compile(fn, backend="tpu")
    for _ in range(2):
        torch.manual_seed(7)
        eager = fn(x).cpu()
        torch.manual_seed(7)
        compiled = cfn(x).cpu()
        assert 0.3 < (compiled == 0).float().mean() < 0.7
        torch.testing.assert_close(compiled, eager)
    # Without reseeding, successive replays draw new numbers.
    assert not torch.equal(cfn(x).cpu(), cfn(x).cpu())


def test_new_shapes_recompile_and_match():
    cfn = torch.compile(lambda x: (x * 2).softmax(-1), backend="tpu")
    for n in (3, 5, 7):
        x = torch.randn(n, 6)
        torch.testing.assert_close(cfn(x.to("tpu")).cpu(), (x * 2).softmax(-1))


def test_graph_that_falls_back_runs_op_by_op_with_a_warning():
    def fn(x):
        return torch._standard_gamma_grad(x, x + 1) + 1  # no lowering: runs on the CPU

    x = torch.rand(8) + 2
    cfn = torch.compile(fn, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.testing.assert_close(cfn(x.to("tpu")).cpu(), fn(x))
    assert any("runs op by op" in str(w.message) for w in caught)


def test_modes_and_dynamic():
    x = torch.randn(4, device="tpu")
    with pytest.warns(UserWarning, match="ignores mode='max-autotune'"):
        torch.compile(torch.sin, backend="tpu", mode="max-autotune")(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="dynamic=True"):
        torch.compile(torch.cos, backend="tpu", dynamic=True)(x)


def test_default_backend_is_tpu_for_tpu_tensors_only():
    inductor = torch._TorchCompileInductorWrapper.__call__
    torch.manual_seed(0)
    lin = nn.Linear(8, 4)
    x = torch.randn(2, 8)
    out = torch.compile(copy.deepcopy(lin).to("tpu"))(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), lin(x), rtol=1e-5, atol=1e-5)
    before = torch_tpu.metrics()["executions"]
    torch.testing.assert_close(torch.compile(lin)(x), lin(x))  # Inductor on the CPU
    assert torch_tpu.metrics()["executions"] == before
    assert torch._TorchCompileInductorWrapper.__call__ is inductor


def test_default_backend_takes_graphs_that_make_tpu_tensors():
    # No tpu input (a Python int): the graph makes its tpu tensors, so it is tpu's, not
    # Inductor's (which has no tpu code generator).
    def fn(n):
        return torch.arange(n, device="tpu") * 2 + torch.ones(n, device="tpu")

    torch._dynamo.reset()
    before = torch_tpu.metrics()["executions"]
    out = torch.compile(fn)(5)
    torch.testing.assert_close(out.cpu(), torch.arange(5) * 2.0 + 1)  # runs deferred work too
    assert out.device.type == "tpu" and torch_tpu.metrics()["executions"] > before


def test_selective_checkpointing_around_a_compiled_region(all_captured):
    """TorchTitan's pattern: a compiled function inside a selectively checkpointed block.
    The recompute must see the ops its forward saw, though one call captures the graph
    and the next replays it: to dispatch modes a compiled graph is one op."""
    import functools

    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    compiled_region = torch.ops.higher_order.inductor_compiled_code
    saved = []

    def policy(ctx, func, *args, **kwargs):
        if func is compiled_region and not ctx.is_recompute:
            saved.append(func)
        if func in (torch.ops.aten.mm.default, compiled_region):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    inner = torch.compile(lambda x, w: (x.sin() @ w).relu().t(), backend="tpu")

    def block(x, w):
        return inner(x * 2, w).cos()

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    block(xc, wc).sum().backward()
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    for _ in range(3):  # a capture, then replays
        xt.grad = wt.grad = None
        out = checkpoint(block, xt, wt, use_reentrant=False, context_fn=context)
        out.sum().backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)
        torch.testing.assert_close(wt.grad.cpu(), wc.grad)
    assert len(saved) == 3


def test_explain_reports_graphs_and_breaks():
    def fn(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    report = torch._dynamo.explain(fn)(torch.randn(3, device="tpu"))
    assert report.graph_count == 2
    assert report.graph_break_count == 1


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_model_zoo_sample_compiled_matches_cpu(name, no_fallback, all_captured):
    from torch_tpu.precision import precision
    from torch_tpu.tools import model_zoo

    arch = {n: (n, family, cls) for n, family, cls in model_zoo.architectures()}
    model_type, family, class_name = arch[name]
    with precision("HIGHEST"):
        config = model_zoo.shrunk_config(model_type)
        torch.manual_seed(0)
        cpu_model = model_zoo._model_class(class_name)(config).eval()
        cpu_model = model_zoo._randomize_zero_matrices(cpu_model)
        inputs = model_zoo.make_inputs(family, cpu_model, config, torch.Generator().manual_seed(0))
        tpu_model = copy.deepcopy(cpu_model).to("tpu")
        cpu_out, cpu_loss, cpu_grads = model_zoo._step(cpu_model, inputs)
        compiled = torch.compile(tpu_model, backend="tpu")
        out, loss, grads = model_zoo._step(compiled, model_zoo._to(inputs, "tpu"))
    assert model_zoo.relative_error(out, cpu_out) <= model_zoo.FORWARD_RTOL
    assert model_zoo.relative_error(loss, cpu_loss) <= model_zoo.FORWARD_RTOL
    assert model_zoo.relative_error(grads, cpu_grads) <= model_zoo.GRAD_RTOL


def test_compiled_graph_inside_defer_and_fuse_mode(all_captured):
    def fn(x, w):
        return (x @ w).tanh().sum(1)

    cfn = torch.compile(fn, backend="tpu")
    x, w = torch.randn(6, 5), torch.randn(5, 3)
    with torch_tpu.eager_mode("defer_and_fuse"):
        for i in range(3):  # capture, then replays whose inputs are pending values
            xt = x.to("tpu") * (i + 1)  # recorded, not yet run
            got = cfn(xt, w.to("tpu")) + 1
            torch.testing.assert_close(got.cpu(), fn(x * (i + 1), w) + 1, rtol=1e-5, atol=1e-5)


def test_graph_with_a_cpu_tensor_runs_op_by_op_and_ends_the_capture():
    def fn(x, scale):
        return x * scale

    cfn = torch.compile(fn, backend="tpu")
    x = torch.randn(4)
    with torch_tpu.eager_mode("strict"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in (2.0, 3.0):  # a captured program would bake in the first value
            got = cfn(x.to("tpu"), torch.tensor(s))
            torch.testing.assert_close(got.cpu(), x * s)
        before = torch_tpu.metrics()["deferred_ops"]
        (x.to("tpu") + 1).cpu()
        assert torch_tpu.metrics()["deferred_ops"] == before  # strict again, not recording
    assert any("takes a tensor on cpu" in str(w.message) for w in caught)


def test_host_scalar_inputs_copied_to_tpu_do_not_split_the_graph(all_captured):
    """A 0-d host tensor that the graph only copies to tpu (Transformers' static cache
    keeps its counters so) is copied before the program, which replays."""

    def fn(x, n):
        return x * n.to(x.device) + 1

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(4, device="tpu")
    for n in (2, 3, 5):
        before = torch_tpu.metrics()["executions"]
        out = compiled(x, torch.tensor(n))
        torch.testing.assert_close(out.cpu(), x.cpu() * n + 1)
    # The last call replays one program (the input's copy is a transfer, not a program).
    assert torch_tpu.metrics()["executions"] - before == 1


def test_compiled_outputs_are_not_views_and_take_in_place_ops(all_captured):
    # A replayed program's outputs share its storages but are tensors of their own, as
    # Inductor's are: in-place ops on them work at every call (Trainer's `loss *= scale`
    # failed from the second call, when outputs came back as views).
    results = {}
    for device in ("cpu", "tpu"):
        torch.manual_seed(0)
        m = nn.Linear(4, 2).to(device)
        f = torch.compile(
            lambda x, y, m=m: (F.cross_entropy(m(x), y), m(x), m(x).t(), m(x).sum(0)),
            backend="tpu" if device == "tpu" else "inductor",
        )
        x = torch.ones(3, 4, device=device)
        y = torch.tensor([0, 1, 0], device=device)
        got = []
        for _ in range(4):
            loss, logits, transposed, summed = f(x, y)
            assert not loss._is_view() and not logits._is_view() and not summed._is_view()
            loss *= 2.0
            logits.add_(1.0)
            summed.mul_(3.0)
            loss.backward()
            got.append((loss.detach(), logits.detach(), transposed, summed.detach()))
            got.append(m.weight.grad.clone())
        results[device] = got
    torch.testing.assert_close(results["tpu"], results["cpu"], check_device=False)


def test_compiled_function_returning_a_view_of_its_input_returns_a_view():
    f = torch.compile(lambda x: x.t(), backend="tpu")
    x = torch.ones(2, 3, device="tpu")
    for _ in range(3):
        out = f(x)
        assert out._is_view() and out._base is x
        out.mul_(2.0)
    torch.testing.assert_close(x.cpu(), torch.full((2, 3), 8.0))


# A custom op of another library whose Python reads state besides its arguments (vLLM's
# attention reads the step's metadata so): opaque to the compiler, as to Inductor.
_opaque_state = {}


@torch.library.custom_op("torch_tpu_test::add_state", mutates_args=("out",))
def _add_state(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x + _opaque_state["t"])


@_add_state.register_fake
def _(x, out):
    return None


def test_custom_ops_of_other_libraries_run_at_every_call(all_captured):
    """The graph is split around the op: the pieces before and after it replay their
    programs, and the op runs each call, reading what it reads now."""

    def fn(x):
        out = torch.empty_like(x)  # made for the op, which fills it
        torch.ops.torch_tpu_test.add_state(x * 2, out)
        return out.sin() + 1

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(4, device="tpu")
    for k in range(4):
        _opaque_state["t"] = torch.full((4,), float(k), device="tpu")
        before = torch_tpu.metrics()["cache_misses"]
        torch.testing.assert_close(compiled(x).cpu(), fn(x).cpu())
    # The op's own programs and the pieces' are compiled by the last call.
    assert torch_tpu.metrics()["cache_misses"] == before


def test_host_constants_copied_to_the_device_are_constants_of_the_program(all_captured):
    """A graph that takes no host tensor copies the same host data at every call
    (Helion's launcher uploads a kernel's scalar arguments so): the copy is a constant
    of the captured program, which replays."""

    def fn(x):
        return x * torch.tensor([2.0, 3.0, 4.0]).to(x.device) + 1

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(3, device="tpu")
    want = fn(x).cpu()
    for _ in range(3):
        before = torch_tpu.metrics()
        got = compiled(x).cpu()
        after = torch_tpu.metrics()
        torch.testing.assert_close(got, want)
    assert after["executions"] - before["executions"] == 1
    assert after["cache_misses"] == before["cache_misses"]


def test_host_tensor_inputs_computed_on_before_the_copy_are_read_at_every_call():
    def fn(x, h):
        return x + (h * 2).to(x.device)

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(3, device="tpu")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*runs op by op")
        for k in range(3):
            h = torch.full((3,), float(k))
            torch.testing.assert_close(compiled(x, h).cpu(), x.cpu() + 2 * k)


def test_own_program_runs_the_graph_apart_from_the_work_around_it(all_captured):
    """options={"own_program": True}: the graph is a program of its own; pending work
    before it (another compiled graph, which strict mode leaves pending) runs first, as
    its own program, instead of fusing with it."""

    def before(x):
        return x.sin() - 1

    def scale(x):
        return x * 2 + 1

    x = torch.randn(8, device="tpu")
    want = (x.cpu().sin() - 1) * 2 + 1
    for options, programs in (({"own_program": True}, 2), ({}, 1)):
        torch._dynamo.reset()
        first = torch.compile(before, backend="tpu")
        then = torch.compile(scale, backend="tpu", options=options)
        # Strict mode leaves a compiled graph pending (debug mode runs each at once).
        with torch_tpu.eager_mode("strict"):
            then(first(x)).cpu()  # captures both
            executions = torch_tpu.metrics()["executions"]
            torch.testing.assert_close(then(first(x)).cpu(), want)
            assert torch_tpu.metrics()["executions"] - executions == programs
