"""Eager modes: strict, debug and defer_and_fuse give the same results; DeferAndFuse
defers ops into one fused, cached program, materialised where eager PyTorch needs a
value, and raises invalid-op errors at the op."""

import io
import tempfile

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from tests.test_device import run_python


def run_isolated(code, **env):
    """Runs `code` in a fresh process with its own device locks."""
    return run_python(code, TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="eager_modes_"), **env)


@pytest.fixture
def deferred():
    with torch_tpu.eager_mode("defer_and_fuse"):
        yield


def executions():
    return torch_tpu.metrics()["executions"]


def test_mode_api():
    start = torch_tpu.get_eager_mode()
    with torch_tpu.eager_mode("defer_and_fuse"):
        assert torch_tpu.get_eager_mode() == "defer_and_fuse"
        with torch_tpu.eager_mode(torch_tpu.EagerMode.DEBUG):
            assert torch_tpu.get_eager_mode() is torch_tpu.EagerMode.DEBUG
        assert torch_tpu.get_eager_mode() == torch_tpu.EagerMode.DEFER_AND_FUSE
    assert torch_tpu.get_eager_mode() == start
    assert torch_tpu.EagerMode.DEFER_NEVER is torch_tpu.EagerMode.STRICT
    with pytest.raises(ValueError, match="unknown eager mode 'lazy'"):
        torch_tpu.set_eager_mode("lazy")


@pytest.mark.parametrize(
    "env, mode",
    [
        ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "defer_and_fuse"),
        ({"TPU_LAUNCH_BLOCKING": "1"}, "debug"),
        ({"TORCH_TPU_EAGER_MODE": "strict", "TORCH_TPU_DEFER_AND_FUSE": "1"}, "strict"),
    ],
)
def test_mode_from_environment(env, mode):
    out = run_isolated(
        "import torch_tpu; print('MODE', torch_tpu.get_eager_mode().value)",
        **{
            "TORCH_TPU_EAGER_MODE": "",
            "TORCH_TPU_DEFER_AND_FUSE": "",
            "TPU_LAUNCH_BLOCKING": "",
            **env,
        },
    )
    assert out.returncode == 0, out.stderr
    assert f"MODE {mode}" in out.stdout


def test_ops_are_deferred_until_a_host_read(deferred):
    x = torch.randn(8, 8)
    t = x.to("tpu")
    before = executions()
    y = (t @ t).relu().sum(1) * 2
    assert executions() == before  # recorded, not run
    assert torch_tpu.metrics()["deferred_ops"] > 0
    torch.testing.assert_close(y.cpu(), (x @ x).relu().sum(1) * 2)
    assert executions() == before + 1  # one fused program


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.item(),
        lambda t: t.cpu(),
        lambda t: t.tolist(),
        lambda t: t.numpy() if t.device.type == "cpu" else t.cpu().numpy(),
        lambda t: repr(t),
        lambda t: torch.save(t, io.BytesIO()),
        lambda t: torch.tpu.synchronize(),
        lambda t: torch_tpu.set_eager_mode("defer_and_fuse"),  # a mode switch
        lambda t: torch.nonzero(t.reshape(1)),  # a data-dependent size
    ],
    ids=["item", "cpu", "tolist", "numpy", "print", "save", "synchronize", "mode", "nonzero"],
)
def test_materialisation_points(deferred, read):
    t = torch.ones((), device="tpu")
    y = t * 3 + 1
    before = torch_tpu.metrics()["materializations"]
    read(y)
    after = torch_tpu.metrics()["materializations"]
    assert sum(after.values()) > sum(before.values())
    assert y.item() == 4.0


def test_size_limit_cuts_the_graph():
    out = run_isolated(
        """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("defer_and_fuse")
        x = torch.zeros(4, device="tpu")
        # 12 different ops, twice: nothing repeats within the limit of 10
        ops = [x.add_, x.mul_, x.sub_, x.div_] * 3
        for k in range(24):
            torch.neg_(x) if k % 12 == 11 else ops[k % 12](1 + k // 4)
        cuts = torch_tpu.metrics()["materializations"]
        print("CUTS", cuts.get("size_limit", 0), cuts.get("repeat", 0))
        print("VALUE", x.cpu().tolist())
        """,
        TORCH_TPU_DEFER_MAX_OPS="10",
    )
    assert out.returncode == 0, out.stderr
    assert "CUTS 2 0" in out.stdout, out.stdout
    x = torch.zeros(4)
    ops = [x.add_, x.mul_, x.sub_, x.div_] * 3
    for k in range(24):
        torch.neg_(x) if k % 12 == 11 else ops[k % 12](1 + k // 4)
    assert f"VALUE {x.tolist()}" in out.stdout, out.stdout


def test_a_generation_loop_without_host_reads_compiles_a_few_small_graphs():
    # nanoGPT's sampling reads nothing back between tokens: its whole loop was
    # deferred and cut at the size limit, graphs of 2,048 ops that took a minute to
    # compile. A graph that repeats inside itself (from half the limit) is cut there,
    # and the graphs after are cut where the loop comes round again: a few
    # iterations each, the same cached program.
    out = run_isolated(
        """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("defer_and_fuse")
        def generate(w, idx):
            for _ in range(120):
                h = torch.tanh(w[idx[:, -1]] @ w.t())
                logits = h.softmax(-1).log() * 2 - 1
                idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], 1)
            return idx
        w = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
        idx = torch.zeros(1, 1, dtype=torch.long)
        got = generate(w.to("tpu"), idx.to("tpu")).cpu()
        m = torch_tpu.metrics()
        print("EQUAL", torch.equal(got, generate(w, idx)))
        print("COMPILES", m["compiles"], "CUTS", m["materializations"])
        """,
        TORCH_TPU_CACHE_DIR=tempfile.mkdtemp(),
        TORCH_TPU_DEFER_MAX_OPS="512",
    )
    assert out.returncode == 0, out.stderr
    assert "EQUAL True" in out.stdout, out.stdout
    compiles = int(out.stdout.split("COMPILES ")[1].split()[0])
    cuts = eval(out.stdout.split("CUTS ")[1])
    # 840 ops (a limit of 512 keeps the test short): the first graph is cut where it
    # repeats inside (256 ops on), the others where the loop comes round (64 on),
    # never at the limit.
    assert "size_limit" not in cuts and cuts.get("repeat", 0) >= 5, out.stdout
    assert compiles <= 8, out.stdout


def views_and_in_place(x):
    y = x.clone()
    y[1:3].mul_(10)  # in place on a view
    z = y.t()[::2]  # strided view of an updated storage
    y.add_(1)  # the view sees this write
    w = torch.cat([z, y[:, :2].t()], 0)
    w.diagonal().zero_()
    return w.sum(0, keepdim=True) + y.mean()


def test_views_and_in_place_writes_match_strict(deferred):
    x = torch.randn(4, 4)
    torch.testing.assert_close(views_and_in_place(x.to("tpu")).cpu(), views_and_in_place(x))


def test_random_ops_draw_the_strict_numbers():
    def draw():
        torch.manual_seed(7)
        a = torch.rand(5, device="tpu")
        b = torch.randn(3, 3, device="tpu")
        c = F.dropout(torch.ones(64, device="tpu"), 0.5)
        return [t.cpu() for t in (a, b, c)]

    strict = draw()
    with torch_tpu.eager_mode("defer_and_fuse"):
        fused = draw()
    for s, f in zip(strict, fused):
        torch.testing.assert_close(s, f, rtol=0, atol=0)


def errors(fn):
    try:
        fn()
    except Exception as e:
        return type(e), str(e)
    return None


def test_invalid_op_raises_at_the_call_as_in_strict():
    a = torch.ones(2, 3, device="tpu")
    b = torch.ones(4, 5, device="tpu")
    invalid = [lambda: a @ b, lambda: a.sum(5), lambda: a.view(7), lambda: a + b]
    strict = [errors(fn) for fn in invalid]
    with torch_tpu.eager_mode("defer_and_fuse"):
        before = executions()
        fused = [errors(fn) for fn in invalid]
        assert executions() == before  # raised at the call, nothing ran
        assert (a * 2).sum().item() == 12.0  # the graph is still usable
    assert all(strict) and fused == strict


def test_device_failure_names_the_fused_ops(deferred):
    x = torch.ones(4, device="tpu")
    torch_tpu._C._poison_storage(x, "injected device failure")
    y = x.exp() + 1
    with pytest.raises(RuntimeError, match="aten::exp.*aten::add.Tensor.*injected device failure"):
        y.cpu()


def test_only_live_values_are_outputs(deferred, tmp_path):
    dump = run_isolated(
        """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("defer_and_fuse")
        x = torch.ones(16, device="tpu")
        t = x
        for _ in range(10):
            t = (t * 2).sin()  # every intermediate is freed at once
        kept = x + 1
        torch.tpu.synchronize()
        print(t.sum().item() != 0, kept.sum().item())
        """,
        TORCH_TPU_DUMP_DIR=str(tmp_path),
    )
    assert dump.returncode == 0, dump.stderr
    programs = sorted(tmp_path.glob("*.mlir"), key=lambda p: int(p.stem.split("_")[1]))
    text = programs[-2].read_text()  # the graph materialised by synchronize()
    signature = next(line for line in text.splitlines() if "func.func public @main" in line)
    results = signature.split("->")[1]
    # x, t and kept: not the 20 temporaries, which were freed before the read.
    assert results.count("tensor<") == 3, signature


def test_training_steps_repeat_cached_graphs(deferred):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = [p.detach().clone() for p in model.parameters()]
    data = [(torch.randn(5, 8), torch.randint(0, 4, (5,))) for _ in range(6)]

    def train(device):
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(
            device
        )
        with torch.no_grad():
            for p, r in zip(m.parameters(), reference):
                p.copy_(r)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        losses, counts = [], []
        for x, y in data:
            before = torch_tpu.metrics()
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            after = torch_tpu.metrics()
            made = (after["compiles"] + after["persistent_cache_hits"]) - (
                before["compiles"] + before["persistent_cache_hits"]
            )
            counts.append((after["executions"] - before["executions"], made))
            losses.append(loss.item())
        return losses, counts

    losses_cpu, _ = train("cpu")
    losses, counts = train("tpu")
    torch.testing.assert_close(losses, losses_cpu, rtol=1e-4, atol=1e-5)
    # A step is two programs, cut at the start and end of optimizer.step(): the
    # forward and backward, then the update. The first step creates Adam's state, so
    # the second makes (compiles or loads) at most its steady update (none when an
    # earlier test of the process made it); then nothing.
    assert [e for e, _ in counts] == [2] * len(counts), counts
    assert counts[1][1] <= 1 and [m for _, m in counts[2:]] == [0] * 4, counts


def test_debug_mode_raises_at_the_op():
    with torch_tpu.eager_mode("debug"):
        x = torch.ones(4, device="tpu")
        torch_tpu._C._poison_storage(x, "boom")
        with pytest.raises(RuntimeError, match="asynchronous execution of aten::clone failed"):
            x.clone()


def test_freed_pending_storage_is_safe(deferred):
    x = torch.ones(1000, device="tpu")
    y = x * 2
    x.add_(1)
    del x  # freed while its value is pending
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0))


def test_resize_and_reupload_of_pending_storage(deferred):
    x = torch.zeros(4, device="tpu")
    x.add_(3)
    x.resize_(8)  # a storage operation outside the graph
    assert x[:4].tolist() == [3.0] * 4
    x.copy_(torch.arange(8.0))
    assert (x * 2).tolist() == [2.0 * i for i in range(8)]


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_a_storage_emptied_and_regrown_runs_no_program(mode):
    # FSDP2 frees each unsharded parameter's storage between its uses
    # (`resize_(0)`) and grows it again before the next all-gather writes it.
    with torch_tpu.eager_mode(mode):
        w = torch.arange(6.0, device="tpu")
        y = w * 2  # pending in defer_and_fuse: the graph reads w before it is emptied
        w.add_(1)
        before = executions()
        w.untyped_storage().resize_(0)
        # defer_and_fuse runs the pending graph (a reshard ends a layer's graph); no
        # resize program in either mode
        assert executions() == before + (mode == "defer_and_fuse")
        assert w.untyped_storage().nbytes() == 0
        w.untyped_storage().resize_(24)
        assert executions() == before + (mode == "defer_and_fuse")
        w.copy_(torch.arange(6.0, device="tpu") + 10)  # all-gather's write
        assert (w + y).tolist() == [10.0 + 3 * i for i in range(6)]
        w.untyped_storage().resize_(0)
        w.untyped_storage().resize_(24)
        assert w.tolist() == [0.0] * 6  # new bytes read as zeros, like the pad of a resize


def test_loop_without_host_reads_settles_on_cached_graphs():
    out = run_isolated(
        """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("defer_and_fuse")
        w = torch.randn(8, 8, device="tpu")
        x = torch.randn(4, 8, device="tpu")
        compiles = []
        for i in range(60):  # 6 ops per iteration: the size limit (20) cuts mid-iteration
            x = torch.tanh(x @ w).mul(0.5).add(1.0).sub_(0.25).relu()
            compiles.append(torch_tpu.metrics()["compiles"])
        print("LATE_COMPILES", compiles[-1] - compiles[20])
        print("REASONS", torch_tpu.metrics()["materializations"])
        """,
        TORCH_TPU_DEFER_MAX_OPS="20",
    )
    assert out.returncode == 0, out.stderr
    assert "LATE_COMPILES 0" in out.stdout, out.stdout
    assert "'repeat'" in out.stdout, out.stdout
