"""Indexed updates on tpu against the CPU: index_add/copy/fill/reduce, scatter_reduce,
masked_scatter, take/put, unfold's backward, renorm and cross."""

import math

import pytest
import torch
from op_utils import check
from torch.testing import make_tensor

import torch_tpu  # noqa: F401

INF = math.inf


def make(shape, dtype=torch.float32, low=None, high=None, seed=0):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", low=low, high=high)


def grads(fn, *inputs):
    """Runs fn on inputs that require grad and returns their gradients of
    sum(fn(...) * weights)."""

    def run(*xs):
        xs = [x.detach().requires_grad_() for x in xs]
        y = fn(*xs)
        w = torch.linspace(0.5, 2.0, y.numel(), dtype=y.dtype).reshape(y.shape).to(y.device)
        (y * w).sum().backward()
        return [x.grad for x in xs]

    return check(run, *inputs, atol=1e-5, rtol=1e-4)


INDEX = torch.tensor([2, 0, 3, 2])  # with a repeat


# ---------------------------------------------------------------- index_add, index_copy, index_fill


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_index_add(dtype):
    x = make((4, 5), dtype)
    src = make((4, 4), dtype, seed=1)
    check(lambda t, i, s: torch.index_add(t, 1, i, s), x, INDEX, src)
    check(lambda t, i, s: torch.index_add(t, 0, i, s.t()), x, INDEX, make((5, 4), dtype, seed=2))
    if dtype != torch.bool:
        check(lambda t, i, s: torch.index_add(t, 1, i, s, alpha=2), x, INDEX, src)


def test_index_add_forms():
    x, src = make((3, 4, 5)), make((3, 4, 4), seed=1)
    check(lambda t, i, s: t.index_add_(2, i, s), x, INDEX, src)
    check(lambda t, i, s: t[:, ::2].index_add_(1, i, s), x, torch.tensor([1, 1]), make((3, 2, 5)))
    check(lambda t, i, s, o: torch.index_add(t, 2, i, s, out=o), x, INDEX, src, torch.empty(0))
    scalar = torch.tensor(1.0)
    check(lambda t, i, s: torch.index_add(t, 0, i, s), scalar, torch.tensor([0]), torch.tensor(5.0))
    grads(lambda t, s: torch.index_add(t, 2, INDEX.to(t.device), s, alpha=3), x, src)


def test_index_copy():
    x, src = make((4, 5)), make((4, 3), seed=1)
    index = torch.tensor([4, 0, 2])
    check(lambda t, i, s: torch.index_copy(t, 1, i, s), x, index, src)
    check(lambda t, i, s: t.index_copy_(0, i, s), make((5, 4)), index, make((3, 4), seed=2))
    check(lambda t, i, s: t.t().index_copy_(0, i, s.t()), x, index, src)
    xi, si = make((2, 5), torch.int32), make((2, 3), torch.int32, seed=1)
    check(lambda t, i, s: torch.index_copy(t, 1, i, s), xi, index, si)
    grads(lambda t, s: torch.index_copy(t, 1, index.to(t.device), s), x, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_index_fill(dtype):
    x = make((4, 5), dtype)
    check(lambda t, i: torch.index_fill(t, 1, i, 1), x, torch.tensor([2, 0, -1, 2]))
    check(lambda t, i, v: t.index_fill_(0, i, v), x, torch.tensor([3, 1]), torch.tensor(0))
    check(lambda t, i: t[:, 1:].index_fill_(1, i, True), x, torch.tensor(2))


def test_index_fill_grad():
    index = torch.tensor([1, 3])
    grads(lambda t: torch.index_fill(t, 0, index.to(t.device), -2.0), make((4, 5)))


# ---------------------------------------------------------------- index_reduce, scatter_reduce


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    def fn(t, i, s):
        return torch.index_reduce(t, 1, i, s, reduce, include_self=include_self)

    check(fn, make((4, 5)), INDEX, make((4, 4), seed=1))
    check(fn, make((4, 5), torch.int64), INDEX, make((4, 4), torch.int64, seed=1))
    check(lambda t, i, s: t.index_reduce_(0, i, s, reduce), make((4, 2)), INDEX, make((4, 2)))


def test_index_reduce_grad():
    x, src = make((4, 5), low=0.5, high=2), make((4, 4), low=0.5, high=2, seed=1)
    for reduce in ["prod", "mean", "amax"]:
        grads(lambda t, s, r=reduce: torch.index_reduce(t, 1, INDEX.to(t.device), s, r), x, src)


SCATTER_INDEX = torch.tensor([[0, 4, 4, 1], [2, 2, 2, 2], [3, 0, 1, 3]])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    def fn(t, i, s):
        return torch.scatter_reduce(t, 1, i, s, reduce, include_self=include_self)

    # src larger than index: only its corner is used.
    check(fn, make((3, 5)), SCATTER_INDEX, make((3, 6), seed=1))
    check(fn, make((3, 5), torch.int32), SCATTER_INDEX, make((3, 6), torch.int32, seed=1))
    check(
        lambda t, i, s: t.scatter_reduce_(1, i, s, reduce),
        make((3, 5)),
        SCATTER_INDEX,
        make((3, 4)),
    )


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_scatter_reduce_complex_mean_divides_as_div(dtype):
    # The mean is the sum divided as torch.div divides (c10::complex's division), to the
    # last bit, as on the CPU.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, dtype=dtype, generator=gen).to("tpu")
    src = torch.randn(3, 4, dtype=dtype, generator=gen).to("tpu")
    index = SCATTER_INDEX.to("tpu")
    mean = torch.scatter_reduce(x, 1, index, src, "mean")
    total = torch.scatter_reduce(x, 1, index, src, "sum")
    count = torch.ones(3, 5, dtype=dtype, device="tpu").scatter_add_(
        1, index, torch.ones(3, 4, dtype=dtype, device="tpu")
    )
    torch.testing.assert_close(mean.cpu(), (total / count).cpu(), atol=0, rtol=0)


def test_scatter_reduce_forms():
    index = torch.tensor([[0, 1, 2], [3, 3, 0]])
    x, src = make((4, 3), torch.bfloat16), make((2, 3), torch.bfloat16, seed=1)
    check(lambda t, i, s: torch.scatter_reduce(t, 0, i, s, "sum"), x, index, src)
    check(lambda t, i, s: torch.scatter_reduce(t.t(), 1, i, s, "amax"), x, index, src)
    x, src = make((4, 3), low=0.5, high=2), make((2, 3), low=0.5, high=2, seed=1)
    for reduce in ["sum", "prod", "mean", "amin"]:

        def fn(t, s, r=reduce):
            return torch.scatter_reduce(t, 0, index.to(t.device), s, r, include_self=False)

        grads(fn, x, src)


# ---------------------------------------------------------------- masked_scatter, take, put


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_masked_scatter(dtype):
    x = make((3, 4), dtype)
    mask = make((3, 4), torch.bool, seed=1)
    src = make((20,), dtype, seed=2)
    check(lambda t, m, s: torch.masked_scatter(t, m, s), x, mask, src)
    check(lambda t, m, s: t.t().masked_scatter_(m.t(), s.reshape(4, 5)), x, mask, src)
    check(lambda t, m, s: torch.masked_scatter(t, m[0], s), x, mask, src)  # broadcast mask


def test_masked_scatter_grad():
    x, mask, src = make((3, 4)), make((3, 4), torch.bool, seed=1), make((5, 4), seed=2)
    grads(lambda t, s: torch.masked_scatter(t, mask.to(t.device), s), x, src)
    grads(lambda t, s: torch.masked_scatter(t, mask[1].to(t.device), s), x, src)


TAKE_INDEX = torch.tensor([[0, -1, 5], [11, 3, 3]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_take_put(dtype):
    x = make((3, 4), dtype)
    src = make((2, 3), dtype, seed=1)
    check(lambda t, i: torch.take(t, i), x, TAKE_INDEX)
    check(lambda t, i: torch.take(t.t(), i), x, TAKE_INDEX)
    check(lambda t, i, s: torch.put(t, i, s), x, TAKE_INDEX, src)
    check(lambda t, i, s: t.t().put_(i, s), x, TAKE_INDEX, src)
    if dtype != torch.bool:
        check(lambda t, i, s: t.put_(i, s, accumulate=True), x, TAKE_INDEX, src)


def test_take_put_grad():
    grads(lambda t: torch.take(t, TAKE_INDEX.to(t.device)), make((3, 4)))

    def put(t, s):
        return torch.put(t, TAKE_INDEX.to(t.device), s, accumulate=True)

    grads(put, make((3, 4)), make((2, 3), seed=1))


# ---------------------------------------------------------------- unfold backward, renorm, cross


@pytest.mark.parametrize("size,step", [(2, 1), (3, 2), (2, 3)])
def test_unfold_backward(size, step):
    grads(lambda t: t.unfold(1, size, step), make((3, 7, 2)))
    grads(lambda t: t.unfold(-1, size, step), make((7,)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
def test_renorm(dtype):
    x = make((3, 4, 5), dtype, seed=3)
    check(lambda t: torch.renorm(t, 2, 0, 3.0), x)
    check(lambda t: torch.renorm(t, 1, 1, 5.0), x)
    check(lambda t: torch.renorm(t.transpose(0, 2), 3.5, 2, 2.0), x)
    check(lambda t: torch.renorm(t, INF, -1, 1.0), x)


def test_renorm_forms():
    x = make((4, 6), seed=3)
    check(lambda t: t.renorm_(2, 1, 1.0), x)
    check(lambda t, o: torch.renorm(t, 2, 0, 1.0, out=o), x, torch.empty(0))
    grads(lambda t: torch.renorm(t, 2, 0, 2.0), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64])
def test_cross(dtype):
    a, b = make((4, 3), dtype), make((4, 3), dtype, seed=1)
    check(lambda x, y: torch.linalg.cross(x, y), a, b)
    check(lambda x, y: torch.cross(x.t(), y.t(), dim=0), a, b)
    check(lambda x, y: torch.linalg.cross(x[:1], y), a, b)  # broadcast
    check(lambda x, y, o: torch.linalg.cross(x, y, out=o), a, b, torch.empty(0, dtype=dtype))


def test_cross_grad():
    grads(lambda x, y: torch.linalg.cross(x, y, dim=0), make((3, 5)), make((3, 5), seed=1))


# ---------------------------------------------------------------- TorchScript


@torch.jit.script
def _scripted_set(x: torch.Tensor, index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    x[index] = value
    return x


@torch.jit.script
def _scripted_get(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x[index]


@pytest.mark.parametrize(
    "index", [torch.tensor([True, False, True, False]), torch.tensor([3, 0])], ids=["mask", "long"]
)
def test_torchscript_indexing(index):
    # TorchScript passes the indices as a generic list of IValues.
    x = torch.arange(4.0)
    for value in (torch.tensor(7.0), torch.tensor([5.0, 6.0])):
        check(lambda t, i, v: _scripted_set(t.clone(), i, v), x, index, value)
    check(_scripted_get, x, index)
