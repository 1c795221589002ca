"""Loss functions (nll/cross entropy, regression, binary) forward and backward against the
CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run
from op_utils import check

A = torch.ops.aten
FLOATS = [torch.float32, torch.float64, torch.bfloat16]
REDUCTIONS = ["none", "mean", "sum"]


def targets(*shape, classes, ignore=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, classes, shape, generator=gen)
    if ignore is not None:
        t[..., ::3] = ignore
    return t


# ---------------------------------------------------------------- nll / cross entropy


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_nll_loss(reduction, weighted, ignore_index):
    x = randn(6, 5)
    t = targets(6, classes=5, ignore=ignore_index if ignore_index >= 0 else -100)
    w = randn(5, seed=2).abs() if weighted else None
    run(
        lambda i, tt, ww: F.nll_loss(i, tt, ww, ignore_index=ignore_index, reduction=reduction),
        x,
        t,
        w,
        grad=[0],
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_nll_loss_dtypes(dtype):
    x, t = randn(8, 7, dtype=dtype), targets(8, classes=7, ignore=-100)
    w = randn(7, seed=2, dtype=dtype).abs()
    run(lambda i, tt, ww: F.nll_loss(i, tt, ww), x, t, w, grad=[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_unbatched(reduction):
    x = randn(5)
    for t in (torch.tensor(3), torch.tensor(-100)):
        run(lambda i, tt: F.nll_loss(i, tt, reduction=reduction), x, t, grad=[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss2d(reduction, weighted):
    x = randn(2, 4, 3, 5)
    t = targets(2, 3, 5, classes=4, ignore=1)
    w = randn(4, seed=3).abs() if weighted else None
    run(
        lambda i, tt, ww: F.nll_loss(i, tt, ww, ignore_index=1, reduction=reduction),
        x,
        t,
        w,
        grad=[0],
    )


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_forward_total_weight(reduction):
    x, t, w = randn(6, 4), targets(6, classes=4, ignore=-100), randn(4).abs()
    check(lambda i, tt, ww: A.nll_loss_forward(i, tt, ww, reduction, -100), x, t, w)
    x2, t2 = randn(2, 4, 3, 3), targets(2, 3, 3, classes=4, ignore=-100)
    check(lambda i, tt, ww: A.nll_loss2d_forward(i, tt, ww, reduction, -100), x2, t2, w)


def test_nll_loss_all_ignored_is_nan():
    x, t = randn(3, 4), torch.full((3,), -100)
    out = run(lambda i, tt: F.nll_loss(i, tt), x, t, grad=[0])
    assert out.cpu().isnan()


def test_nll_loss_non_contiguous_and_int32_free_layouts():
    x = randn(5, 8)
    t = targets(4, classes=5)
    run(lambda i, tt: F.nll_loss(i.t()[::2], tt), x, t)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy(smoothing, weighted, reduction):
    x = randn(6, 5)
    t = targets(6, classes=5, ignore=-100)
    w = randn(5, seed=4).abs() if weighted else None
    run(
        lambda i, tt, ww: F.cross_entropy(
            i, tt, ww, reduction=reduction, label_smoothing=smoothing
        ),
        x,
        t,
        w,
        grad=[0],
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_2d(smoothing):
    x = randn(2, 4, 3, 5)
    t = targets(2, 3, 5, classes=4, ignore=0)
    run(
        lambda i, tt: F.cross_entropy(i, tt, ignore_index=0, label_smoothing=smoothing),
        x,
        t,
        grad=[0],
    )


def test_cross_entropy_module_training_step():
    lin = torch.nn.Linear(6, 4).double()
    x, t = randn(8, 6, dtype=torch.float64), targets(8, classes=4)
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=torch.tensor([1.0, 2.0, 0.5, 1.0]).double(), label_smoothing=0.05
    )

    def step(logits, tt):
        return loss_fn.to(logits.device)(logits, tt)

    run(step, lin(x).detach(), t, grad=[0])


# ---------------------------------------------------------------- regression

REGRESSION = {
    "mse": lambda i, t, r: F.mse_loss(i, t, reduction=r),
    "smooth_l1": lambda i, t, r: F.smooth_l1_loss(i, t, reduction=r, beta=0.5),
    "smooth_l1_beta1": lambda i, t, r: F.smooth_l1_loss(i, t, reduction=r),
    "huber": lambda i, t, r: F.huber_loss(i, t, reduction=r, delta=0.7),
    "huber_wide": lambda i, t, r: F.huber_loss(i, t, reduction=r, delta=2.0),
    "soft_margin": lambda i, t, r: F.soft_margin_loss(i, t.sign(), reduction=r),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", REGRESSION)
def test_regression_losses(name, reduction):
    fn = REGRESSION[name]
    grad = [0] if name == "soft_margin" else [0, 1]  # no gradient for its target
    run(lambda i, t: fn(i, t, reduction), randn(4, 7), randn(4, 7, seed=1), grad=grad)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", REGRESSION)
def test_regression_losses_dtypes(name, dtype):
    fn = REGRESSION[name]
    grad = [0] if name == "soft_margin" else [0, 1]
    run(
        lambda i, t: fn(i, t, "mean"),
        randn(4, 7, dtype=dtype),
        randn(4, 7, seed=1, dtype=dtype),
        grad=grad,
    )


def test_regression_non_contiguous():
    x, t = randn(7, 4), randn(4, 7, seed=1)
    run(lambda i, tt: F.mse_loss(i.t(), tt), x, t, grad=[0, 1])
    run(lambda i, tt: F.huber_loss(i.t(), tt, reduction="sum"), x, t, grad=[0, 1])


def test_smooth_l1_backward_beta_zero():
    # beta == 0 is l1 in the forward (PyTorch switches to l1_loss); the backward op itself has
    # PyTorch's sign convention at x == t.
    x = torch.tensor([1.0, 2.0, 3.0, -1.0])
    t = torch.tensor([1.0, 1.0, 4.0, -1.0])
    check(lambda g, i, tt: A.smooth_l1_loss_backward(g, i, tt, 1, 0.0), torch.tensor(1.0), x, t)
    check(lambda i, tt: A.smooth_l1_loss(i, tt, 2, 0.0), x, t)


def test_mse_loss_out():
    x, t = randn(3, 4), randn(3, 4, seed=1)
    check(lambda i, tt, o: torch._C._nn.mse_loss(i, tt, out=o), x, t, torch.empty(0))


# ---------------------------------------------------------------- binary


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    x = torch.rand(5, 6, dtype=torch.float64).float().clamp(0.01, 0.99)
    x[0, 0], x[0, 1] = 0.0, 1.0  # the logs clamp at -100
    t = torch.rand(5, 6)
    w = torch.rand(6) if weighted else None
    run(lambda i, tt, ww: F.binary_cross_entropy(i, tt, ww, reduction=reduction), x, t, w, grad=[0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_binary_cross_entropy_dtypes(dtype):
    x = torch.rand(5, 6).clamp(0.01, 0.99).to(dtype)
    t = torch.rand(5, 6).to(dtype)
    run(lambda i, tt: F.binary_cross_entropy(i, tt), x, t, grad=[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights", ["none", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(reduction, weights):
    x, t = randn(5, 6) * 4, torch.rand(5, 6)
    w = torch.rand(6) if weights in ("weight", "both") else None
    pw = torch.rand(6) * 3 if weights in ("pos_weight", "both") else None
    run(
        lambda i, tt, ww, pp: F.binary_cross_entropy_with_logits(
            i, tt, ww, reduction=reduction, pos_weight=pp
        ),
        x,
        t,
        w,
        pw,
    )


def test_kl_div_composite():
    x = F.log_softmax(randn(4, 5), -1)
    t = F.softmax(randn(4, 5, seed=1), -1)
    run(lambda i, tt: F.kl_div(i, tt, reduction="batchmean"), x, t, grad=[0])
