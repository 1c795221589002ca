"""Storage, view and in-place semantics: the same code on CPU and on tpu gives the same
results, views alias their base, and writes through one alias are seen by all."""

import pytest
import torch
from op_utils import assert_close_tree


def run_both(fn):
    """Runs ``fn(device)`` on cpu and tpu and compares what it returns."""
    expected = fn("cpu")
    actual = fn("tpu")
    assert_close_tree(actual, expected, check_stride=True)


def base(device, *shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=dtype).reshape(shape).to(device)


# ---------------------------------------------------------------- view kinds

VIEWS = {
    "view": lambda x: x.view(4, 6),
    "view_minus_one": lambda x: x.view(-1),
    "reshape_view": lambda x: x.reshape(2, 12),
    "transpose": lambda x: x.transpose(0, 2),
    "t_of_2d": lambda x: x[0].t(),
    "permute": lambda x: x.permute(2, 0, 1),
    "expand": lambda x: x[:, :1, :].expand(2, 5, 4),
    "narrow": lambda x: x.narrow(1, 1, 2),
    "slice_step": lambda x: x[:, ::2, 1::2],
    "slice_negative_start": lambda x: x[..., -2:],
    "select": lambda x: x.select(1, 2),
    "index_int": lambda x: x[1, 2],
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x[:, :1].squeeze(1),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "diagonal_offset": lambda x: x.diagonal(1, 0, 2),
    "unfold": lambda x: x.unfold(2, 2, 1),
    "unfold_step": lambda x: x.view(-1).unfold(0, 5, 3),
    "as_strided": lambda x: x.as_strided((3, 3), (5, 2), 1),
    "as_strided_overlap": lambda x: x.as_strided((4, 4), (1, 1)),
    "flatten": lambda x: x.transpose(0, 1).flatten(1),
    "unflatten": lambda x: x.unflatten(2, (2, 2)),
    "movedim": lambda x: x.movedim(0, -1),
    "split": lambda x: x.split(1, dim=1)[2],
    "chunk": lambda x: x.chunk(2, dim=2)[1],
    "unbind": lambda x: x.unbind(0)[1],
    "view_dtype": lambda x: x.view(torch.int32),
    "alias": lambda x: x[...],
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_reads_like_cpu(name):
    def fn(device):
        x = base(device, 2, 3, 4)
        v = VIEWS[name](x)
        return v.contiguous() if name == "view_dtype" else v

    run_both(fn)


@pytest.mark.parametrize(
    "name", sorted(n for n in VIEWS if n not in ("expand", "as_strided_overlap"))
)
def test_write_through_view_is_seen_by_base(name):
    def fn(device):
        x = base(device, 2, 3, 4)
        v = VIEWS[name](x)
        v.fill_(-1) if name != "view_dtype" else v.fill_(7)
        return x, v

    run_both(fn)


@pytest.mark.parametrize(
    "name", sorted(n for n in VIEWS if n not in ("expand", "as_strided_overlap", "view_dtype"))
)
def test_copy_into_view(name):
    def fn(device):
        x = base(device, 2, 3, 4)
        v = VIEWS[name](x)
        src = torch.arange(v.numel(), dtype=torch.float32).reshape(v.shape) * 10
        v.copy_(src.to(device))
        return x

    run_both(fn)


def test_views_share_storage():
    x = torch.zeros(4, 4, device="tpu")
    v = x[1:3, ::2]
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert v.storage_offset() == 4 and v.stride() == (4, 2)
    assert v._base is x


def test_aliasing_after_inplace_writes():
    def fn(device):
        x = base(device, 4, 4)
        row, col, diag = x[1], x[:, 2], x.diagonal()
        row.fill_(1)
        col.copy_(torch.tensor([9.0, 8.0, 7.0, 6.0]).to(device))
        diag.zero_()
        t = x.t()
        t[0, 3] = 42
        return x, row, col, diag, t

    run_both(fn)


def test_overlapping_views_of_same_storage():
    def fn(device):
        x = base(device, 10)
        a, b = x[0:6], x[4:10]
        a.fill_(1)
        b.copy_(torch.arange(6.0).to(device))
        return x, a, b

    run_both(fn)


def test_write_through_expanded_view_is_an_error():
    x = torch.zeros(3, device="tpu")
    with pytest.raises(RuntimeError, match="single memory location"):
        x.expand(2, 3).add_(1)


def test_setitem_with_broadcasting_and_steps():
    def fn(device):
        x = base(device, 3, 6)
        x[:, ::2] = torch.tensor([1.0, 2.0, 3.0]).to(device)
        x[1:, 1] = -5.0
        x[..., -1] = x[..., 0]
        return x

    run_both(fn)


def test_inplace_op_reading_its_own_storage():
    def fn(device):
        x = base(device, 8)
        x[1:].copy_(x[:-1].clone())
        y = base(device, 2, 2)
        y.copy_(y.t().clone())
        return x, y

    run_both(fn)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_copy_from_partially_overlapping_view_is_an_error(device):
    y = base(device, 2, 2)
    with pytest.raises(RuntimeError, match="single memory location"):
        y.copy_(y.t())


def test_dtype_view_round_trip():
    def fn(device):
        x = torch.tensor([1.0, -2.0, 0.5]).to(device)
        bits = x.view(torch.int32)
        bits[0] = 0
        return x, bits

    run_both(fn)


def test_dtype_view_of_bool_as_uint8():
    def fn(device):
        x = torch.tensor([True, False, True]).to(device)
        u = x.view(torch.uint8)
        u[1] = 1
        return x, u

    run_both(fn)


# ---------------------------------------------------------------- out=


def test_out_into_view_and_resize():
    def fn(device):
        out = torch.zeros(3, 4).to(device)
        torch.cat([torch.ones(1, 2), torch.ones(1, 2) * 2], 1, out=out[1]) if False else None
        src = base(device, 2, 3)
        fresh = torch.empty(0).to(device)
        torch.cat([src, src], 0, out=fresh)  # resized from empty
        view_out = out[:, 1]
        torch.cat(
            [torch.tensor([5.0]).to(device), torch.tensor([6.0, 7.0]).to(device)], out=view_out
        )
        return out, fresh

    run_both(fn)


def test_out_with_wrong_shape_warns_and_resizes():
    def fn(device):
        out = torch.zeros(5).to(device)
        with pytest.warns(UserWarning, match="resized"):
            torch.cat([base(device, 2), base(device, 2)], out=out)
        return out

    run_both(fn)


def test_out_different_dtype():
    def fn(device):
        out = torch.zeros(4, dtype=torch.float64).to(device)
        torch.cat([base(device, 2), base(device, 2)], out=out)
        return out

    run_both(fn)


# ---------------------------------------------------------------- storage ops


def test_set_shares_storage():
    def fn(device):
        x = base(device, 6)
        y = torch.empty(0).to(device)
        y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
        y.fill_(-3)
        return x, y

    run_both(fn)
    x = torch.zeros(6, device="tpu")
    y = torch.empty(0, device="tpu").set_(x)
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_set_source_tensor_view():
    def fn(device):
        x = base(device, 4, 4)
        y = torch.empty(0).to(device)
        y.set_(x[1:, 1:])
        y[0, 0] = 100
        return x, y

    run_both(fn)


def test_resize_keeps_prefix_and_grows():
    def fn(device):
        x = base(device, 6)
        x.resize_(2, 2)
        kept = x.clone()
        x.resize_(3, 4)
        x[2].fill_(1)  # grown elements are uninitialised until written
        return kept, x.view(-1)[:6].clone(), x[2].clone()

    run_both(fn)


def test_resize_grows_storage_seen_by_views():
    x = torch.arange(4.0).to("tpu")
    x.resize_(8)
    assert x.untyped_storage().nbytes() == 32
    assert x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_untyped_storage_resize():
    x = torch.arange(4.0).to("tpu")
    x.untyped_storage().resize_(32)
    assert x.untyped_storage().nbytes() == 32
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_clone_is_independent():
    def fn(device):
        x = base(device, 3)
        y = x.clone()
        x.fill_(0)
        return x, y

    run_both(fn)


def test_detach_shares_storage():
    def fn(device):
        x = base(device, 3).requires_grad_()
        y = x.detach()
        y.zero_()
        return x.detach(), y

    run_both(fn)


def test_version_counter_tracks_inplace():
    x = torch.zeros(3, device="tpu")
    v0 = x._version
    x[1:].fill_(1)
    assert x._version > v0


def test_dtype_views_of_other_widths():
    def fn(device):
        x = torch.tensor([1.5, -2.0, 3.25]).to(device)
        u = x.view(torch.uint8)
        u[0] = 7
        halves = x.view(torch.int16)
        c = torch.tensor([1 + 2j, 3 - 4j]).to(device)
        r = torch.view_as_real(c)
        r[1, 0] = 10
        z = torch.view_as_complex(torch.arange(6.0).reshape(3, 2).to(device))
        return x, u, halves, c, r, z

    run_both(fn)


def test_conjugate_and_negative_bits():
    x = torch.randn(3, 4, dtype=torch.complex64)
    xt = x.to("tpu")
    torch.testing.assert_close(xt.conj().cpu(), x.conj())
    torch.testing.assert_close(torch._neg_view(xt.conj()).cpu(), -x.conj())
    torch.testing.assert_close(x.conj().to("tpu").cpu(), x.conj())
    torch.testing.assert_close(x.conj().to("tpu", torch.complex128).cpu(), x.conj().cdouble())
    # Written through a conjugate view: the storage holds the conjugate.
    y = torch.zeros(3, 4, dtype=torch.complex64, device="tpu")
    y.conj().copy_(xt)
    torch.testing.assert_close(y.cpu(), x.conj())
    z = torch.zeros(3, 4, dtype=torch.complex64)
    z.conj().copy_(xt)
    torch.testing.assert_close(z, x.conj())
    # Kernels that take lazily conjugated inputs (mm, vdot) see their values.
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        torch.testing.assert_close((xt.conj() @ xt.t()).cpu(), x.conj() @ x.t())


def _layout(t, perm):
    """`t` with the same values, its storage laid out in the order `perm`."""
    inverse = [perm.index(d) for d in range(len(perm))]
    return t.permute(perm).contiguous().permute(inverse)


def test_many_layouts_of_one_op_share_its_dense_program():
    # addcmul_ of three operands in each of 6 layouts: 216 layouts of one op at one shape.
    # Past a few, the operands go through dense copies (a program per layout, shared by all
    # ops) into one dense program, instead of a program per combination.
    import itertools

    import torch_tpu

    torch.manual_seed(0)
    self_cpu, x_cpu, y_cpu = (torch.randn(4, 5, 6) for _ in range(3))
    expected = self_cpu.addcmul(x_cpu, y_cpu, value=0.5)
    self_tpu, x_tpu, y_tpu = (t.to("tpu") for t in (self_cpu, x_cpu, y_cpu))
    perms = list(itertools.permutations(range(3)))
    laid_out = {p: [_layout(t, p) for t in (self_tpu, x_tpu, y_tpu)] for p in perms}
    before = torch_tpu.metrics()["cache_misses"]
    with torch_tpu.eager_mode("strict"):  # the bound is strict eager's (fused graphs differ)
        for p_self, p_x, p_y in itertools.product(perms, repeat=3):
            s = laid_out[p_self][0].clone(memory_format=torch.preserve_format)
            s.addcmul_(laid_out[p_x][1], laid_out[p_y][2], value=0.5)
            assert s.stride() == laid_out[p_self][0].stride()
            # Within rounding: the CPU's addcmul is a fused multiply-add, XLA's one
            # where its optimisation level forms it (small programs compile at level 0).
            torch.testing.assert_close(s.cpu(), expected, msg=str((p_self, p_x, p_y)))
    programs = torch_tpu.metrics()["cache_misses"] - before
    # 216 layouts compiled a program each; now: 8 of them, the dense one, the copies in and
    # out of each layout and the clones.
    assert programs < 60, programs


@pytest.mark.parametrize(
    "op",
    [
        lambda x, out: torch.exp(x, out=out),
        lambda x, out: torch.add(x, torch.ones(4, device=x.device), out=out),
        lambda x, out: torch.mul(x, 2, out=out.double()),
    ],
)
def test_a_resized_out_takes_the_layout_of_the_inputs(op):
    # TensorIterator lays out an out= tensor it resizes as the functional result.
    def strides(device):
        x = torch.randn(2, 3, 8, device=device)[:, :, ::2].permute(1, 0, 2)
        return op(x, torch.empty(0, device=device)).stride()

    assert strides("tpu") == strides("cpu") == (4, 12, 1)


def test_a_resized_out_warns_on_every_call_in_the_cpus_words():
    import warnings

    def messages(device):
        a = torch.eye(3, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # the second call hits every cache
                outs = (torch.empty(7, 7, device=device), torch.empty(7, 7, device=device))
                torch.linalg.eigh(a, out=outs)
                torch.exp(a, out=torch.empty(2, device=device))
        return sorted(str(w.message) for w in caught)

    cpu = messages("cpu")
    assert len(cpu) == 6 and "[7, 7], which does not match the required output shape" in cpu[-1]
    assert messages("tpu") == cpu


# ---------------------------------------------------------------- reading views back

READ_BACK = {
    "transpose": lambda x: x.transpose(0, 2),
    "strided_slice": lambda x: x[1:4, ::2, 3],
    "inner_slice": lambda x: x[..., 2:],
    "expanded": lambda x: x.unsqueeze(1).expand(5, 3, 6, 7),
    "permuted_slice": lambda x: x.permute(2, 0, 1)[3:],
    "element": lambda x: x[2, 3, 4],
}


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_views_of_small_storages_read_back_without_a_program(dtype):
    """A view of a small storage comes to the host with its storage and is gathered
    there: reading slices and transposes back compiles nothing."""
    import torch_tpu

    cpu = (torch.randn(5, 6, 7) * 10).to(dtype)
    tpu = cpu.to("tpu")
    before = torch_tpu.metrics()["cache_misses"]
    for name, view in READ_BACK.items():
        assert torch.equal(view(tpu).cpu(), view(cpu)), name
    assert torch_tpu.metrics()["cache_misses"] == before  # no program, not even a cached one


def test_a_small_view_of_a_large_storage_is_copied_on_the_device():
    big = torch.randn(1024, 1024)
    tpu = big.to("tpu")
    assert torch.equal(tpu[3, ::7].cpu(), big[3, ::7])
    assert torch.equal(tpu.t()[5:900].cpu(), big.t()[5:900])
