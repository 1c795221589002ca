"""Structural ops on tpu against the CPU: scatters into views and their
backward ops, unchecked indexing, functional view copies, stacking and
factories PyTorch composes from several ops (triangle indices, logspace,
range, windows)."""

import pytest
import torch
from op_utils import check
from torch.testing import make_tensor

import torch_tpu

aten = torch.ops.aten


def make(shape, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    return make_tensor(shape, dtype=dtype, device="cpu", **kwargs)


def programs(fn):
    """Runs fn and returns how many programs it executed on the device."""
    before = torch_tpu.metrics()["executions"]
    fn()
    return torch_tpu.metrics()["executions"] - before


# ---------------------------------------------------------------- scatters into views


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_slice_scatter(dtype):
    x, src = make((6, 5), dtype), make((3, 6), dtype, seed=1)
    # step 2 on dim 1; src is a non-contiguous transpose
    check(lambda t, s: torch.slice_scatter(t, s.t(), 1, 0, None, 2), x, src)
    check(lambda t, s: torch.slice_scatter(t, s[:2], 0, -3, -1), x, make((5, 5), dtype))


def test_select_and_diagonal_scatter():
    x = make((4, 5, 3))
    check(lambda t, s: torch.select_scatter(t, s, 1, -2), x, make((4, 3), seed=1))
    check(lambda t, s: torch.diagonal_scatter(t, s, 1, 0, 1), x, make((3, 4), seed=2))
    check(lambda t, s: torch.diagonal_scatter(t, s, -1, 2, 0), x, make((5, 2), seed=3))
    out = make((4, 5, 3)).to("tpu")
    res = aten.select_scatter.out(x.to("tpu"), make((4, 3), seed=1).to("tpu"), 1, 0, out=out)
    assert res is out
    torch.testing.assert_close(out.cpu(), torch.select_scatter(x, make((4, 3), seed=1), 1, 0))


def test_view_backward_ops():
    g = make((4, 3))
    check(lambda t: aten.select_backward(t, [4, 5, 3], 1, -1), g)
    check(lambda t: aten.slice_backward(t, [4, 7, 3], 1, 1, 2**62, 2), make((4, 3, 3)))
    check(lambda t: aten.diagonal_backward(t, [5, 4], -1, 0, 1), make((4,)))


def test_view_gradients():
    def fn(t):
        t = t.detach().requires_grad_()
        y = t[2] * 2 + t[1:5:2, ::3].sum(0).repeat(3) + t.diagonal(1)[:5].sum()
        y.sum().backward()
        return t.grad

    check(fn, make((5, 6)))


# ---------------------------------------------------------------- unchecked indexing


def test_unsafe_index():
    x = make((5, 4, 3))
    i, j = torch.tensor([[0, 4], [-1, 2]]), torch.tensor([1, -3])
    check(lambda t, a, b: aten._unsafe_index(t, [a, None, b]), x, i, j)
    check(lambda t, a: aten._unsafe_index(t, [None, a]), x, j)
    v = make((2, 2, 4))
    check(lambda t, a, b, v: aten._unsafe_index_put(t, [a, None, b], v), x, i, j, v)
    check(lambda t, a, b, v: aten._unsafe_index_put(t, [a, None, b], v, True), x, i, j, v)


def test_unsafe_masked_index():
    x = make((5, 4))
    i = torch.tensor([[0, 7], [-9, 2]])  # out of range where masked off
    mask = torch.tensor([[True, False], [False, True]])[..., None]
    check(lambda t, m, a: aten._unsafe_masked_index(t, m, [a], 1.5), x, mask, i)
    v = make((2, 2, 4), seed=1)
    check(
        lambda t, m, a, v: aten._unsafe_masked_index_put_accumulate(t, m, [a], v),
        x,
        mask,
        i,
        v,
    )


# ---------------------------------------------------------------- view copies


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.bool])
def test_view_copies(dtype):
    x = make((4, 6, 2), dtype)
    check(lambda t: aten.view_copy(t, [8, -1]), x)
    check(lambda t: aten.permute_copy(t, [2, 0, 1]), x)
    check(lambda t: aten.expand_copy(t[:1], [3, 4, 6, 2]), x)
    check(lambda t: aten.slice_copy(t, 1, -5, None, 2), x)
    check(lambda t: aten.select_copy(t, 1, -1), x)
    check(lambda t: aten.transpose_copy(t, 0, 2), x)
    check(lambda t: aten.t_copy(t[0]), x)
    check(lambda t: aten.unsqueeze_copy(t, -1), x)
    check(lambda t: aten.squeeze_copy(t[:1], 0), x)
    check(lambda t: aten.diagonal_copy(t, -1, 1, 0), x)
    check(lambda t: aten.unfold_copy(t, 1, 3, 2), x)
    check(lambda t: aten.unfold_copy(t, 0, 0, 1), x)
    check(lambda t: aten.split_copy(t, 4, 1), x)
    check(lambda t: aten.split_with_sizes_copy(t, [1, 3], 0), x)
    check(lambda t: aten.unbind_copy(t, 2), x)
    check(lambda t: aten.narrow_copy(t, 1, -4, 3), x)
    check(lambda t: aten.alias_copy(t.transpose(0, 1)), x)


def test_view_copy_dtype_and_complex():
    x = make((3, 4))
    check(lambda t: aten.view_copy(t, torch.int32), x)
    check(lambda t: aten.view_copy(t, torch.bfloat16), x)
    check(lambda t: aten.view_copy(t, torch.float64), x)
    check(lambda t: aten.view_as_complex_copy(t.view(3, 2, 2)), x)
    check(lambda t: aten.view_as_real_copy(t), make((3, 2), torch.complex64))


# ---------------------------------------------------------------- stacking


def test_stack():
    a, b = make((3, 4)), make((4, 3), torch.float16, seed=1)
    check(lambda x, y: torch.stack([x, y.t()], -1), a, b)
    check(lambda x, y: torch.stack([x, y.t()], 1, out=torch.empty(0, device=x.device)), a, b)


def test_block_diag_chunk_cat_rot90():
    a, b, c = make((2, 3)), make((3,), torch.int64, seed=1), make((), seed=2)
    check(lambda x, y, z: torch.block_diag(x, y, z, x.t()), a, b, c)
    x, y = make((5, 4)), make((3, 2), seed=1)
    check(lambda s, t: aten._chunk_cat([s, t], 0, 2), x, y)
    check(lambda s, t: aten._chunk_cat([s, t.t()], 1, 3), x, make((2, 5), seed=1))
    for k in (1, 2, 3, -1):
        check(lambda s, k=k: torch.rot90(s[:, ::2], k, [1, 0]), x)


# ---------------------------------------------------------------- factories


def factory(fn):
    """Compares fn(device) on tpu with the CPU; it must run as one program.

    The first call also runs PyTorch's meta function, which for these composite
    factories runs their decomposition on the device: the second call counts.
    """
    expected = fn("cpu")
    torch.testing.assert_close(fn("tpu").cpu(), expected)
    assert programs(lambda: torch.testing.assert_close(fn("tpu").cpu(), expected)) == 1


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_triangle_indices(fn):
    factory(lambda d: fn(4, 6, 1, device=d))
    factory(lambda d: fn(5, 3, -2, dtype=torch.int32, device=d))


@pytest.mark.filterwarnings("ignore:torch.range is deprecated")
def test_logspace_range():
    factory(lambda d: torch.logspace(-2, 3, 7, device=d))
    factory(lambda d: torch.logspace(0, 2, 9, base=2.0, dtype=torch.float64, device=d))
    factory(lambda d: torch.logspace(1, 6, 6, dtype=torch.int64, device=d))
    factory(lambda d: torch.logspace(-1, 2, 5, dtype=torch.complex64, device=d))
    factory(lambda d: torch.range(-1, 2, 0.25, device=d))
    factory(lambda d: torch.range(3, 11, 2, dtype=torch.int32, device=d))


@pytest.mark.parametrize(
    "fn",
    [
        lambda d: torch.hann_window(10, device=d),
        lambda d: torch.hann_window(7, periodic=False, dtype=torch.float64, device=d),
        lambda d: torch.hamming_window(9, False, 0.5, 0.3, device=d),
        lambda d: torch.blackman_window(8, dtype=torch.float64, device=d),
        lambda d: torch.blackman_window(5, periodic=False, device=d),
        # reduced precision rounds like PyTorch's chain of ops (exactly)
        lambda d: torch.blackman_window(17, dtype=torch.float16, device=d),
        lambda d: torch.hann_window(301, dtype=torch.bfloat16, device=d),
        lambda d: torch.bartlett_window(9, periodic=False, device=d),
        lambda d: torch.bartlett_window(1, device=d),
    ],
)
def test_windows(fn):
    factory(fn)
