"""Operators whose result sizes depend on values: one synchronisation, then native."""

import pytest
import torch

from op_utils import check


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (), (0, 3)])
def test_nonzero(dtype, shape):
    x = (torch.randn(shape) > 0.3).to(dtype)
    check(torch.nonzero, x)
    check(lambda t: torch.nonzero(t, as_tuple=True), x)
    check(lambda t: torch.nonzero(t.t() if t.dim() == 2 else t), x)


def test_nonzero_static():
    x = torch.tensor([[0, 1, 0], [2, 0, 3]])
    for size in (0, 2, 3, 5):
        check(lambda t, s=size: torch.nonzero_static(t, size=s, fill_value=-7), x)


def test_masked_select_broadcasts():
    x, m = torch.randn(3, 4), torch.randn(4) > 0
    check(torch.masked_select, x, m)
    check(torch.masked_select, x[:, ::2], m[:2])
    check(lambda a, b: torch.masked_select(a, b, out=torch.empty(0, device=a.device)), x, m)


def test_boolean_mask_indexing():
    x = torch.randn(4, 5, 6)
    mask2 = torch.randn(4, 5) > 0
    mask1 = torch.randn(6) > 0
    check(lambda t, m: t[m], x, mask2)
    check(lambda t, m: t[:, :, m], x, mask1)
    check(lambda t, m: t[1, m[0]], x, mask2)
    # A CPU mask indexes a tpu tensor, as with CUDA.
    check(lambda t: t[:, :, mask1], x)


def test_boolean_mask_assignment():
    x = torch.randn(4, 5)
    mask = torch.randn(4, 5) > 0

    def assign(t, m):
        t[m] = -1.0
        t[~m] += torch.arange(int((~m).sum()), dtype=t.dtype, device=t.device)
        return t

    check(assign, x, mask)


def test_boolean_mask_errors():
    x = torch.randn(4, 5).to("tpu")
    with pytest.raises(IndexError, match="shape of the mask"):
        x[torch.ones(3, dtype=torch.bool, device="tpu")]


def test_boolean_mask_gradient():
    x = torch.randn(4, 5, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    (x[x > 0] ** 2).sum().backward()
    (xt[xt > 0] ** 2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_equal():
    x = torch.randn(3, 4)
    check(lambda a: torch.equal(a, a.clone()), x)
    check(lambda a: torch.equal(a, a + 1), x)
    check(lambda a: torch.equal(a, a[:2]), x)
    check(lambda a: torch.equal(a / 0 * 0, a / 0 * 0), x)  # NaN is not equal to itself


def test_bincount():
    x = torch.tensor([0, 3, 3, 1, 7, 3])
    check(torch.bincount, x)
    check(lambda t: torch.bincount(t, minlength=12), x)
    check(lambda t, w: torch.bincount(t, weights=w), x, torch.rand(6))
    check(lambda t, w: torch.bincount(t, weights=w), x, torch.rand(6, dtype=torch.float64))
    check(lambda t: torch.bincount(t, minlength=3), torch.zeros(0, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device="tpu"))


def test_repeat_interleave():
    repeats = torch.tensor([2, 0, 3, 1])
    check(torch.repeat_interleave, repeats)
    check(lambda r: torch.repeat_interleave(r, output_size=6), repeats)
    x = torch.randn(4, 3)
    check(lambda t, r: torch.repeat_interleave(t, r, dim=0), x, repeats)
    check(lambda t: torch.repeat_interleave(t, 3, dim=1), x)
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -2], device="tpu"))


@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)])
def test_unique(dim, flags):
    inverse, counts = flags
    x = torch.randint(0, 4, (5, 6))
    check(lambda t: torch.unique(t, dim=dim, return_inverse=inverse, return_counts=counts), x)
    check(
        lambda t: torch.unique_consecutive(
            t, dim=dim, return_inverse=inverse, return_counts=counts
        ),
        torch.tensor([[1, 1, 2], [1, 1, 2], [0, 3, 3], [1, 1, 2]]),
    )


def test_unique_float_nan_and_empty():
    x = torch.tensor([1.0, float("nan"), 0.0, 2.0, float("nan"), 1.0])
    check(lambda t: torch.unique(t, return_counts=True, return_inverse=True), x)
    check(lambda t: torch.unique(t, return_inverse=True), torch.zeros(0))
    check(torch.unique, torch.tensor([True, False, True]))


def test_assert_async():
    torch._assert_async(torch.tensor(1.0, device="tpu"))
    torch._assert_async(torch.tensor(True, device="tpu"), "fine")
    with pytest.raises(RuntimeError, match="single nonzero value"):
        torch._assert_async(torch.tensor(0, device="tpu"))
    with pytest.raises(RuntimeError, match="index out of range"):
        torch._assert_async(torch.tensor(False, device="tpu"), "index out of range")


def test_is_set_to():
    x = torch.randn(4, device="tpu")
    y = torch.empty(0, device="tpu").set_(x)
    assert y.is_set_to(x) and x.is_set_to(y)
    assert not x.is_set_to(x.clone())
