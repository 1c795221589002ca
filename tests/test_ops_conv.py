"""Convolutions (convolution, _convolution, convolution_backward) against the CPU.

Forward results and the gradients of input, weight and bias are compared for 1d/2d/3d,
strided, padded, dilated, grouped and transposed convolutions. float32 runs at
Precision.HIGHEST (tests/conftest.py). Each configuration compiles a few programs
(XLA:CPU takes ~0.3 s per convolution), so the list is curated rather than a product.
"""

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from op_utils import check, fallbacks

CONV_OPS = {"convolution", "_convolution", "convolution_backward"}
aten = torch.ops.aten


def conv_fell_back(before):
    after = fallbacks()
    return {
        op: n
        for op, n in after.items()
        if n != before.get(op, 0) and op.removeprefix("aten::").split(".")[0] in CONV_OPS
    }


@dataclass
class Conv:
    nd: int
    n: int = 2  # batch
    cin: int = 4
    cout: int = 6
    size: tuple = (7,)
    kernel: tuple = (3,)
    stride: tuple = (1,)
    padding: tuple = (0,)
    dilation: tuple = (1,)
    groups: int = 1
    transposed: bool = False
    output_padding: tuple = (0,)

    def dims(self, v):
        return tuple(v) * self.nd if len(v) == 1 else tuple(v)

    def tensors(self, dtype=torch.float32, bias=True):
        x = torch.randn(self.n, self.cin, *self.dims(self.size), dtype=dtype)
        shape = (
            (self.cin, self.cout // self.groups)
            if self.transposed
            else (self.cout, self.cin // self.groups)
        )
        w = torch.randn(*shape, *self.dims(self.kernel), dtype=dtype)
        b = torch.randn(self.cout, dtype=dtype) if bias else None
        return x, w, b

    def __call__(self, x, w, b=None):
        kw = {
            "stride": self.dims(self.stride),
            "padding": self.dims(self.padding),
            "dilation": self.dims(self.dilation),
            "groups": self.groups,
        }
        if self.transposed:
            fn = getattr(F, f"conv_transpose{self.nd}d")
            return fn(x, w, b, output_padding=self.dims(self.output_padding), **kw)
        return getattr(F, f"conv{self.nd}d")(x, w, b, **kw)


CONFIGS = {
    "1d_stride3_dil2_groups2": Conv(
        1, n=1, size=(11,), kernel=(4,), stride=(3,), padding=(2,), dilation=(2,), groups=2
    ),
    "1d_transposed_groups2": Conv(
        1, size=(7,), stride=(2,), padding=(1,), groups=2, transposed=True, output_padding=(1,)
    ),
    "2d": Conv(2, cin=3, cout=5, size=(8, 9), padding=(1,)),
    "2d_stride2_drops_tail": Conv(2, size=(8, 9), stride=(2,)),
    "2d_dilation2": Conv(2, size=(9, 9), padding=(2,), dilation=(2,)),
    "2d_depthwise": Conv(2, cin=3, cout=6, size=(7, 7), padding=(1,), groups=3),
    "2d_padding_beyond_kernel": Conv(2, size=(5, 5), kernel=(1,), padding=(2,)),
    "2d_per_dim": Conv(
        2, size=(9, 8), kernel=(3, 2), stride=(1, 2), padding=(0, 1), dilation=(2, 1)
    ),
    "2d_transposed": Conv(
        2, size=(5, 6), stride=(2,), padding=(1,), output_padding=(1,), groups=2, transposed=True
    ),
    "2d_transposed_dil2_stride3": Conv(
        2, size=(4, 5), stride=(3,), dilation=(2,), output_padding=(2,), transposed=True
    ),
    "2d_transposed_padding_beyond_reach": Conv(
        2, size=(6, 6), stride=(2,), padding=(3,), transposed=True
    ),
    "2d_transposed_stride1_dil2_outpad": Conv(
        2, n=1, size=(5, 5), dilation=(2,), output_padding=(1,), transposed=True
    ),
    "3d_stride2_groups2_dil": Conv(
        3, size=(6, 7, 6), stride=(2,), dilation=(1, 2, 1), groups=2, padding=(1, 0, 2)
    ),
    "3d_transposed": Conv(
        3,
        cin=2,
        cout=4,
        size=(3, 4, 3),
        stride=(2,),
        padding=(1,),
        output_padding=(1, 0, 1),
        transposed=True,
    ),
}


def same(t):
    return t


def compare(
    conv, x, w, b=None, *, grads=(True, True, True), views=(same, same, same), atol=None, rtol=None
):
    """Forward and backward on tpu against the CPU. ``views`` turn the leaves into what
    the convolution receives (slices, transposes), on both devices."""

    def leaves(device):
        return [
            t if t is None else t.detach().to(device, copy=True).requires_grad_(g)
            for t, g in zip((x, w, b), grads)
        ]

    def run(leaves):
        return conv(*(t if t is None else v(t) for t, v in zip(leaves, views)))

    cpu, tpu = leaves("cpu"), leaves("tpu")
    before = fallbacks()
    y_tpu = run(tpu)
    grad = torch.randn(y_tpu.shape, dtype=y_tpu.dtype)
    y_tpu.backward(grad.to("tpu"))
    assert not conv_fell_back(before)
    y_cpu = run(cpu)
    y_cpu.backward(grad)
    torch.testing.assert_close(y_tpu.detach().cpu(), y_cpu.detach(), atol=atol, rtol=rtol)
    for name, a, e in zip(("input", "weight", "bias"), tpu, cpu):
        if e is not None and e.requires_grad:
            torch.testing.assert_close(
                a.grad.cpu(),
                e.grad,
                atol=atol,
                rtol=rtol,
                msg=lambda m, n=name: f"grad of {n}: {m}",
            )


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# float32 sums of a few hundred products: CPU and XLA order them differently.
F32 = {"atol": 2e-5, "rtol": 2e-5}


@pytest.mark.parametrize("name", CONFIGS)
def test_conv_forward_and_grads(name):
    conv = CONFIGS[name]
    compare(conv, *conv.tensors(), **F32)


def test_conv_float64_exact():
    conv = CONFIGS["2d_transposed"]
    compare(conv, *conv.tensors(torch.float64))


def forward_and_grads(conv, leaves, grad):
    leaves = [t.detach().requires_grad_() for t in leaves]
    y = conv(*leaves)
    y.backward(grad.to(y.device, y.dtype))
    return [t.detach().cpu().double() for t in [y] + [t.grad for t in leaves]]


def test_conv_bfloat16_accumulates_in_float32():
    # Against the exact result for the same bf16 inputs: one rounding of a float32 sum.
    # (PyTorch's CPU kernel rounds more often: it is further from exact than we are.)
    conv = CONFIGS["2d_depthwise"]
    x, w, b = conv.tensors(torch.bfloat16)
    grad = torch.randn(conv(x, w, b).shape).bfloat16()
    exact = forward_and_grads(conv, [t.double() for t in (x, w, b)], grad)
    before = fallbacks()
    ours = forward_and_grads(conv, [t.to("tpu") for t in (x, w, b)], grad)
    assert not conv_fell_back(before)
    for a, e in zip(ours, exact):
        torch.testing.assert_close(a, e, atol=2**-8 * e.abs().max().item(), rtol=2**-8)


def test_channels_last():
    conv = CONFIGS["2d_transposed"]
    x, w, b = conv.tensors()
    compare(
        conv,
        x.to(memory_format=torch.channels_last),
        w.to(memory_format=torch.channels_last),
        b,
        **F32,
    )


def test_sliced_and_transposed_inputs():
    conv = CONFIGS["2d_dilation2"]  # 4 -> 6 channels, 3x3 kernel
    x, w, b = torch.randn(2, 4, 9, 18), torch.randn(6, 4, 3, 3), torch.randn(6)
    # Gradients flow through the views back to the dense leaves.
    compare(conv, x, w, b, views=(lambda t: t[..., ::2], lambda t: t.transpose(2, 3), same), **F32)


def test_no_bias():
    conv = CONFIGS["2d_transposed"]
    x, w, _ = conv.tensors(bias=False)
    compare(conv, x, w, **F32)


def test_input_without_grad():
    conv = CONFIGS["2d_depthwise"]
    compare(conv, *conv.tensors(), grads=(False, True, True), **F32)


@pytest.mark.parametrize(
    "mask",
    [[True, False, False], [False, True, False], [False, False, True], [False, True, True]],
    ids=str,
)
def test_backward_output_mask(mask):
    x, w = torch.randn(2, 4, 7, 7), torch.randn(6, 2, 3, 3)
    g = torch.randn(2, 6, 4, 4)
    args = ([2, 2], [1, 1], [1, 1], False, [0, 0], 2, mask)
    before = fallbacks()
    ours = aten.convolution_backward(g.to("tpu"), x.to("tpu"), w.to("tpu"), [6], *args)
    assert not conv_fell_back(before)
    # Results left out are None, as the meta kernel says (the CPU kernel sometimes
    # computes grad_weight anyway).
    assert [r is not None for r in ours] == mask
    expected = aten.convolution_backward(g, x, w, [6], *args)
    for r, e in zip(ours, expected):
        if r is not None:
            torch.testing.assert_close(r.cpu(), e, **F32)


def test_backward_all_results_directly():
    x, w = torch.randn(2, 4, 7, 7), torch.randn(4, 3, 3, 2)
    g = torch.randn(2, 6, 15, 16)
    args = ([2, 2], [1, 0], [1, 2], True, [1, 1], 2, [True, True, True])
    check(lambda g, x, w: aten.convolution_backward(g, x, w, [6], *args), g, x, w, **F32)


def test_convolution_entry_points():
    x, w, b = torch.randn(2, 4, 6, 6), torch.randn(6, 2, 3, 3), torch.randn(6)
    args = ([1, 2], [1, 0], [1, 1], False, [0, 0], 2)
    check(lambda x, w, b: aten.convolution(x, w, b, *args), x, w, b, **F32)
    check(
        lambda x, w, b: aten._convolution(x, w, b, *args, False, False, True, True), x, w, b, **F32
    )
    check(lambda x, w: aten.convolution(x, w, None, *args), x, w, **F32)


def test_padding_modes():
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    check(lambda x, w: F.conv2d(x, w, padding="same", dilation=2), x, w, **F32)
    check(lambda x, w: F.conv2d(x, w, padding="valid"), x, w, **F32)


def test_unbatched_input():
    check(lambda x, w: F.conv1d(x, w), torch.randn(4, 9), torch.randn(5, 4, 3), **F32)


def test_empty_batch():
    check(
        lambda x, w, b: F.conv2d(x, w, b),
        torch.randn(0, 3, 5, 5),
        torch.randn(4, 3, 3, 3),
        torch.randn(4),
    )


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8], ids=str)
def test_integers_convolve_exactly(dtype):
    # int8 wraps in its own type, like PyTorch's kernel.
    x = torch.randint(0, 100, (2, 3, 9), dtype=dtype)
    w, b = torch.randint(0, 100, (4, 3, 3), dtype=dtype), torch.randint(0, 100, (4,), dtype=dtype)
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), x, w, b)


def test_bool_errors_like_cpu():
    # The CPU's kernel has no bool branch: tpu raises its error, learnt from that
    # kernel (csrc/aten/meta_errors.cpp), without running the op on the CPU.
    x, w = torch.ones(1, 1, 3, dtype=torch.bool), torch.ones(1, 1, 2, dtype=torch.bool)
    with pytest.raises(RuntimeError) as cpu:
        F.conv1d(x, w)
    before = fallbacks()
    with pytest.raises(type(cpu.value)) as tpu:
        F.conv1d(x.to("tpu"), w.to("tpu"))
    assert str(tpu.value) == str(cpu.value)
    assert not conv_fell_back(before)


def test_cnn_training_step_matches_cpu():
    torch.manual_seed(1)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=True),
            torch.nn.Conv2d(8, 8, 3, stride=2, groups=2),
            torch.nn.ConvTranspose2d(8, 4, 2, stride=2),
        )

    model, model_tpu = net(), net().to("tpu")
    model_tpu.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    x_tpu = x.detach().to("tpu").requires_grad_()
    before = fallbacks()
    model_tpu(x_tpu).square().mean().backward()
    assert not conv_fell_back(before)
    model(x).square().mean().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x.grad, **F32)
    for p, q in zip(model.parameters(), model_tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **F32)
