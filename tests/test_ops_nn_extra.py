"""embedding_bag, cdist/pdist, max_unpool, fractional max pooling, margin losses,
segment_reduce and CTC loss, forward and backward, against the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from nn_checks import randn, run

A = torch.ops.aten

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]

# ---------------------------------------------------------------- embedding_bag

INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
OFFSETS = torch.tensor([0, 4, 4, 6])  # bag 1 is empty


def _bag_cases():
    out = []
    for mode in ("sum", "mean", "max"):
        for last in (False, True):
            for padding in (None, 4):
                out.append((mode, last, padding))
    return out


@pytest.mark.parametrize("mode, include_last_offset, padding_idx", _bag_cases(), ids=str)
def test_embedding_bag(mode, include_last_offset, padding_idx):
    offsets = torch.cat([OFFSETS, torch.tensor([8])]) if include_last_offset else OFFSETS
    run(
        lambda w, i, o: F.embedding_bag(
            i,
            w,
            o,
            mode=mode,
            include_last_offset=include_last_offset,
            padding_idx=padding_idx,
        ),
        randn(10, 3, dtype=torch.float64),
        INDICES,
        offsets,
        grad=[0],
    )


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_per_sample_weights(padding_idx):
    run(
        lambda w, i, o, p: F.embedding_bag(
            i, w, o, mode="sum", per_sample_weights=p, padding_idx=padding_idx
        ),
        randn(10, 3),
        INDICES,
        OFFSETS,
        torch.rand(8, generator=torch.Generator().manual_seed(0)),
        grad=[0, 3],
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_half(dtype, mode):
    run(
        lambda w, i, o: F.embedding_bag(i, w, o, mode=mode),
        randn(10, 5, dtype=dtype),
        INDICES,
        OFFSETS,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_embedding_bag_int32_indices_with_int64_offsets(dtype):
    # The CPU makes offset2bag and bag sizes int64 for mixed index dtypes, and its
    # backward takes no other: tpu's results take the CPU kernel's dtypes.
    run(
        lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"),
        randn(10, 5, dtype=dtype),
        INDICES.int(),
        OFFSETS,
        grad=[0],
    )


@pytest.mark.parametrize(
    "indices, offsets, weight",
    [
        ((1, 2, 2), (1,), (4, 3)),
        ((2, 0, 0, 6, 6), (2, 0, 0, 6, 6), (2, 2)),
        ((4,), (1, 1), (4, 3)),
        ((4,), (1,), (4,)),
    ],
    ids=["3-D input", "5-D input", "2-D offsets", "1-D weight"],
)
@pytest.mark.parametrize(
    "op", [A._embedding_bag, A._embedding_bag_forward_only, torch.embedding_bag]
)
def test_embedding_bag_ranks_as_the_cpu(op, indices, offsets, weight):
    args = (
        torch.zeros(weight),
        torch.zeros(indices, dtype=torch.long),
        torch.zeros(offsets, dtype=torch.long),
    )
    with pytest.raises(RuntimeError) as cpu:
        op(*args)
    with pytest.raises(RuntimeError) as tpu:
        op(*(a.to("tpu") for a in args))
    assert str(tpu.value) == str(cpu.value)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_sparse_gradients_are_refused_clearly(padding_idx):
    # The meta kernel of the sparse backward fails on nonzero() with padding_idx; the
    # CPU's result is a sparse tensor, which tpu does not have.
    w = torch.randn(10, 3, device="tpu", requires_grad=True)
    bag = F.embedding_bag(
        torch.tensor([[6, 2, 4, 2]], device="tpu"), w, padding_idx=padding_idx, sparse=True
    )
    with pytest.raises(NotImplementedError, match="(?i)sparse"):
        bag.sum().backward()


def test_embedding_bag_2d_int32_noncontiguous_weight():
    weight = randn(6, 10)[:, ::2]
    indices = torch.tensor([[0, 2, 2], [5, 1, 0]], dtype=torch.int32)
    run(lambda w, i: F.embedding_bag(i, w, mode="mean"), weight, indices, grad=[0])


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    # PyTorch's CPU kernel divides by the count of another index when the indices are not
    # 0..k-1 (INDICES skips some): the lowering reproduces it.
    run(
        lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, scale_grad_by_freq=True),
        randn(10, 3),
        INDICES,
        OFFSETS,
        grad=[0],
    )


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0])
def test_embedding_bag_max_norm(norm_type):
    # max_norm renormalises the looked-up rows of the weight in place (embedding_renorm_).
    run(
        lambda w, i, o: (F.embedding_bag(i, w, o, max_norm=1.0, norm_type=norm_type), w),
        randn(10, 3),
        INDICES,
        OFFSETS,
    )


def test_embedding_bag_aten_forward_only():
    run(
        lambda w, i, o: A._embedding_bag_forward_only(w, i, o, False, 1)[0],
        randn(10, 3),
        INDICES,
        OFFSETS,
    )


@pytest.mark.parametrize("mode, padding_idx", [(0, 4), (1, -1), (2, 4)])
def test_embedding_bag_dense_backward(mode, padding_idx):
    # Each device's backward reads its own forward's offset2bag/bag_size/max_indices (the
    # meta kernel's shapes for them differ from the CPU kernel's).
    def fn(w, i, o, g):
        fwd = A._embedding_bag(w, i, o, False, mode, False, None, False, padding_idx)
        return A._embedding_bag_dense_backward(
            g, i, fwd[1], fwd[2], fwd[3], 10, False, mode, None, padding_idx
        )

    run(fn, randn(10, 3), INDICES, OFFSETS, randn(4, 3, seed=1))


# ---------------------------------------------------------------- distances

P_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist(p):
    x1, x2 = randn(2, 5, 4, dtype=torch.float64), randn(2, 6, 4, dtype=torch.float64, seed=1)
    x2[0, 0] = x1[0, 0]  # a zero distance
    run(lambda a, b: torch.cdist(a, b, p=p), x1, x2, grad=[0, 1])


def test_cdist_broadcast_noncontiguous():
    x1 = randn(1, 4, 6)[..., ::2]
    x2 = randn(3, 5, 3, seed=1)
    run(lambda a, b: torch.cdist(a, b, p=1.0), x1, x2, grad=[0, 1])


@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"])
def test_cdist_euclid_modes(mode):
    x1, x2 = randn(30, 4, dtype=torch.float64), randn(27, 4, dtype=torch.float64, seed=1)
    run(lambda a, b: torch.cdist(a, b, compute_mode=mode), x1, x2, grad=[0, 1])


def test_cdist_large_uses_mm():
    # More than 25 rows: PyTorch computes p=2 as a matmul (its rounding shows).
    run(lambda a, b: torch.cdist(a, b), randn(40, 3), randn(30, 3, seed=1), grad=[0, 1])


@pytest.mark.parametrize("p", P_VALUES)
def test_pdist(p):
    x = randn(6, 4, dtype=torch.float64)
    x[3] = x[1]
    run(lambda a: F.pdist(a, p=p), x, grad=[0])


# ---------------------------------------------------------------- unpooling


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_unpool2d(dtype):
    x = randn(2, 3, 8, 9, dtype=dtype)
    pooled, indices = F.max_pool2d(x, 3, 2, return_indices=True)
    run(lambda v, i: F.max_unpool2d(v, i, 3, 2, output_size=(8, 9)), pooled, indices, grad=[0])


def test_max_unpool1d_and_3d():
    x = randn(2, 3, 10)
    pooled, indices = F.max_pool1d(x, 2, return_indices=True)
    run(lambda v, i: F.max_unpool1d(v, i, 2), pooled, indices, grad=[0])
    x = randn(1, 2, 4, 6, 5)
    pooled, indices = F.max_pool3d(x, 2, return_indices=True)
    run(lambda v, i: F.max_unpool3d(v, i, 2, output_size=(4, 6, 5)), pooled, indices, grad=[0])


# ---------------------------------------------------------------- fractional max pooling

FRACTIONAL = [
    (2, (2, 3, 9, 11), (2, 3), (4, 5)),
    (2, (3, 10, 10), 3, (7, 7)),
    (3, (2, 2, 7, 8, 9), (2, 2, 3), (3, 4, 5)),
    (3, (2, 6, 6, 6), 2, (4, 4, 4)),
]


# Every configuration in float32; the other dtypes on one 2d and one 3d configuration.
FRACTIONAL_CASES = [(cfg, torch.float32) for cfg in FRACTIONAL] + [
    (FRACTIONAL[i], dtype) for i in (1, 2) for dtype in FLOATS[1:]
]


@pytest.mark.parametrize("cfg, dtype", FRACTIONAL_CASES, ids=str)
def test_fractional_max_pool(cfg, dtype):
    k, shape, kernel, out = cfg
    # The random window starts are passed in (_random_samples), so both devices agree.
    planes = (shape[0] if len(shape) == k + 2 else 1, shape[-k - 1])
    samples = torch.rand(*planes, k, generator=torch.Generator().manual_seed(0)).to(dtype)
    pool = F.fractional_max_pool2d if k == 2 else F.fractional_max_pool3d
    run(
        lambda x, u: pool(x, kernel, output_size=out, return_indices=True, _random_samples=u),
        randn(*shape, dtype=dtype),
        samples,
        grad=[0],
    )


# ---------------------------------------------------------------- margin losses


@pytest.mark.parametrize(
    "p, margin, reduction", [(1, 1.0, "none"), (1, 1.0, "sum"), (2, 0.5, "mean"), (1, -2.0, "mean")]
)
def test_multi_margin_loss(p, margin, reduction):
    x, target = randn(5, 7), torch.tensor([0, 6, 3, 3, 1])
    weight = torch.rand(7, generator=torch.Generator().manual_seed(1))
    run(
        lambda a, t, w: F.multi_margin_loss(a, t, p, margin, w, reduction=reduction),
        x,
        target,
        weight,
        grad=[0],
    )
    run(
        lambda a, t: F.multi_margin_loss(a, t, p, margin, reduction=reduction),
        x,
        target,
        grad=[0],
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_margin_losses_half(dtype):
    """The CPU has no half kernels (CUDA has): compared with float32 on the CPU."""
    x = randn(5, 7, dtype=dtype)
    labels = torch.tensor([[3, 0, -1, 1], [2, 2, 1, -1], [0, 1, 2, 3], [-1, 0, 0, 0], [1, 3, 3, 2]])
    cases = [
        (lambda a: F.multi_margin_loss(a, torch.tensor([0, 6, 3, 3, 1]).to(a.device), 2, 0.5)),
        (lambda a: F.multilabel_margin_loss(a[:, :4], labels.to(a.device))),
    ]
    for fn in cases:
        xt, xc = x.to("tpu").requires_grad_(), x.float().requires_grad_()
        got, want = fn(xt), fn(xc)
        got.backward(), want.backward()
        assert got.dtype == xt.grad.dtype == dtype
        torch.testing.assert_close(got.cpu().float(), want, atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(xt.grad.cpu().float(), xc.grad, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    # Each row's targets end at its first -1; later entries are ignored.
    target = torch.tensor([[3, 0, -1, 1, 2], [1, 1, 4, 2, 0], [-1, 2, 2, 0, 0], [4, -1, 3, 3, 3]])
    run(
        lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction),
        randn(4, 5, dtype=torch.float64),
        target,
        grad=[0],
    )
    run(lambda a, t: A.multilabel_margin_loss_forward(a, t, 1), randn(5, 4).t(), target)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(), (5,)], ids=["0-d", "1-d"])
def test_multilabel_margin_loss_one_sample(shape, reduction):
    # One sample's loss is 0-d with every reduction, as on the CPU (PyTorch's meta
    # kernel says [1] for "none").
    target = torch.tensor([3, 0, -1, 1, 2]) if shape else torch.tensor(0)
    run(
        lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction),
        randn(5, dtype=torch.float64).reshape(-1)[: 5 if shape else 1].reshape(shape),
        target,
        grad=[0],
    )


@pytest.mark.parametrize("reduction", ["none", "mean"])
@pytest.mark.parametrize("target", [torch.tensor(1), torch.tensor([1])], ids=["0-d", "1-d"])
@pytest.mark.parametrize("shape", [(3,), (1, 3)], ids=["1-d", "2-d"])
def test_multi_margin_loss_one_sample(shape, target, reduction):
    # The unreduced loss takes the target's shape, as on the CPU (PyTorch's meta kernel
    # says [1] for a 0-d target).
    run(
        lambda a, t: F.multi_margin_loss(a, t, reduction=reduction),
        randn(*shape, dtype=torch.float64),
        target,
        grad=[0],
    )


# ---------------------------------------------------------------- segment_reduce

REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


@pytest.mark.parametrize(
    "reduce, initial", [(r, None) for r in REDUCTIONS] + [(r, 2.5) for r in REDUCTIONS[1:]]
)
def test_segment_reduce_lengths(reduce, initial):
    data = torch.tensor([[1.0, 2], [3, 0], [5, -1], [2, 2], [7, 1], [2, 2]], dtype=torch.float64)
    lengths = torch.tensor([2, 0, 3, 1])
    run(
        lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=initial),
        data,
        lengths,
        grad=[0],
    )


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_segment_reduce_offsets_axis1(reduce):
    data = randn(2, 7, 3, dtype=torch.float64)
    data[1, 2] = data[1, 1]  # a tie for max/min
    offsets = torch.tensor([[0, 3, 3, 7], [0, 1, 5, 7]])
    run(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, axis=1), data, offsets, grad=[0])


@pytest.mark.parametrize(
    "reduce, dtype", [(r, torch.bfloat16) for r in REDUCTIONS] + [("mean", torch.float16)]
)
def test_segment_reduce_half(reduce, dtype):
    lengths = torch.tensor([3, 1, 2])
    run(
        lambda d, n: torch.segment_reduce(d, reduce, lengths=n),
        randn(6, 2, dtype=dtype),
        lengths,
    )


# ---------------------------------------------------------------- ctc_loss

CTC_TARGETS = {
    "padded": torch.tensor([[1, 2, 2], [0, 0, 0], [4, 3, 0]]),
    "concatenated": torch.tensor([1, 2, 2, 4, 3]),
}


@pytest.mark.parametrize("layout", CTC_TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ctc_loss_aten(dtype, layout):
    # log_alpha is only defined (on the CPU) up to each batch's lengths.
    log_probs = randn(7, 3, 5, dtype=dtype).log_softmax(-1)
    lengths, target_lengths = [7, 5, 6], [3, 0, 2]

    def fn(lp, t):
        nll, alpha = A._ctc_loss(lp, t, lengths, target_lengths, 0, False)
        return nll, [alpha[b, : lengths[b], : 2 * target_lengths[b] + 1] for b in range(3)]

    run(fn, log_probs, CTC_TARGETS[layout])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss(reduction):
    # The backward reads the forward's log_alpha.
    log_probs = randn(8, 2, 6).log_softmax(-1)
    targets = torch.tensor([[5, 5, 1, 2], [3, 1, 0, 0]])
    run(
        lambda lp, t: F.ctc_loss(
            lp, t, torch.tensor([8, 6]), torch.tensor([4, 2]), blank=0, reduction=reduction
        ),
        log_probs,
        targets,
        grad=[0],
    )


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_impossible_alignment(zero_infinity):
    # Too short an input for the targets: infinite loss (zero_infinity zeroes it).
    run(
        lambda lp, t: F.ctc_loss(
            lp, t, torch.tensor([3]), torch.tensor([3]), zero_infinity=zero_infinity
        ),
        randn(3, 1, 4).log_softmax(-1),
        torch.tensor([[1, 1, 1]]),
    )


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("layout", CTC_TARGETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ctc_loss_backward(dtype, layout, reduction):
    # Inputs shorter than T (zero gradient past them), an empty target, a repeated label.
    run(
        lambda lp, t: F.ctc_loss(
            lp, t, torch.tensor([7, 5, 6]), torch.tensor([3, 0, 2]), reduction=reduction
        ),
        randn(7, 3, 5, dtype=dtype).log_softmax(-1),
        CTC_TARGETS[layout],
        grad=[0],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ctc_loss_backward_aten(dtype):
    # log_alpha is unwritten past the lengths on the CPU: the backward must not read it there.
    lengths, target_lengths = [7, 5, 6], [3, 0, 2]

    def fn(lp, t, g):
        nll, alpha = A._ctc_loss(lp, t, lengths, target_lengths, 0, False)
        return A._ctc_loss_backward(g, lp, t, lengths, target_lengths, nll, alpha, 0, False)

    run(
        fn,
        randn(7, 3, 5, dtype=dtype).log_softmax(-1),
        CTC_TARGETS["padded"],
        randn(3, dtype=dtype, seed=1),
    )


def test_ctc_loss_backward_batch_first():
    # log_probs a transposed view (the usual batch-first model output), blank last.
    run(
        lambda x, t: F.ctc_loss(
            x.transpose(0, 1).log_softmax(-1),
            t,
            torch.tensor([6, 8]),
            torch.tensor([3, 2]),
            blank=4,
        ),
        randn(2, 8, 5),
        torch.tensor([[0, 3, 3], [2, 1, 0]]),
        grad=[0],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_backward_impossible_alignment(zero_infinity, dtype):
    # Batch 0 cannot align (NaN gradient, or zero with zero_infinity); batch 1 can.
    run(
        lambda lp, t: F.ctc_loss(
            lp, t, torch.tensor([3, 4]), torch.tensor([3, 2]), zero_infinity=zero_infinity
        ),
        randn(4, 2, 4, dtype=dtype).log_softmax(-1),
        torch.tensor([[1, 1, 1], [2, 3, 0]]),
        grad=[0],
    )
