"""Fused optimizer steps (fused=True) and AMP gradient scaling, against the CPU."""

import pytest
import torch

from op_utils import check


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def _params(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g, dtype=dtype) for s in [(4, 3), (5,), ()]]


def _train(device, optimizer_cls, dtype=torch.float32, steps=3, **kwargs):
    params = [p.to(device).requires_grad_() for p in _params(dtype)]
    opt = optimizer_cls(params, fused=True, **kwargs)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=dtype).to(device)
        opt.step()
    state = [opt.state[p] for p in params]
    return [p.detach() for p in params], state


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (torch.optim.Adam, dict(lr=0.01)),
        (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
        (torch.optim.Adam, dict(lr=torch.tensor(0.01), maximize=True)),
        (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
        (torch.optim.AdamW, dict(lr=0.01, amsgrad=True, betas=(0.8, 0.9))),
        (torch.optim.SGD, dict(lr=0.1)),
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
        (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.5)),
        (torch.optim.Adagrad, dict(lr=0.1)),
        (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, eps=1e-6)),
        (torch.optim.Adagrad, dict(lr=torch.tensor(0.1), maximize=True)),
        (torch.optim.Adagrad, dict(lr=0.1, initial_accumulator_value=0.5, lr_decay=0.01)),
    ],
)
def test_fused_optimizer_matches_cpu(cls, kwargs):
    tpu_params, tpu_state = _train("tpu", cls, **kwargs)
    cpu_params, cpu_state = _train("cpu", cls, **kwargs)
    for a, e in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-6)
    for a, e in zip(tpu_state, cpu_state):
        for key in e:
            torch.testing.assert_close(a[key].cpu(), e[key], rtol=1e-5, atol=1e-6)


def test_fused_adam_bfloat16():
    tpu_params, _ = _train("tpu", torch.optim.Adam, torch.bfloat16, lr=0.01)
    cpu_params, _ = _train("cpu", torch.optim.Adam, torch.bfloat16, lr=0.01)
    for a, e in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a.cpu(), e)


@pytest.mark.parametrize("cls", [torch.optim.SGD, torch.optim.AdamW, torch.optim.Adagrad])
def test_fused_bfloat16(cls):
    kwargs = dict(lr=0.01, weight_decay=0.1)
    if cls is torch.optim.SGD:
        kwargs["momentum"] = 0.9
    tpu_params, tpu_state = _train("tpu", cls, torch.bfloat16, **kwargs)
    cpu_params, cpu_state = _train("cpu", cls, torch.bfloat16, **kwargs)
    for a, e in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a.cpu(), e)
    for a, e in zip(tpu_state, cpu_state):
        for key in e:
            torch.testing.assert_close(a[key].cpu(), e[key])


@pytest.mark.parametrize("found_inf", [None, 0.0, 1.0])
@pytest.mark.parametrize("lr", [0.1, torch.tensor(0.1)], ids=["float_lr", "tensor_lr"])
def test_fused_adagrad_grad_scale_and_found_inf(found_inf, lr):
    def step(params, grads, sums, steps, scale, inf):
        torch._fused_adagrad_(
            params, grads, sums, steps, lr=lr, lr_decay=0.1, weight_decay=0.05, eps=1e-8,
            maximize=False, grad_scale=scale, found_inf=inf,
        )  # fmt: skip
        return params, grads, sums, steps

    params = _params()
    grads = [torch.randn_like(p) * 64 for p in params]
    sums = [torch.rand_like(p) for p in params]
    steps = [torch.tensor(3.0) for _ in params]
    inf = None if found_inf is None else torch.tensor(found_inf)
    scale = None if found_inf is None else torch.tensor(64.0)
    check(step, params, grads, sums, steps, scale, inf)


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_adam_grad_scale_and_found_inf(found_inf):
    def step(params, grads, avgs, sqs, steps, scale, inf):
        torch._fused_adam_(
            params, grads, avgs, sqs, [], steps, lr=0.01, beta1=0.9, beta2=0.999,
            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
            grad_scale=scale, found_inf=inf,
        )  # fmt: skip
        return params, grads, avgs, sqs

    params = _params()
    grads = [torch.randn_like(p) * 64 for p in params]
    avgs = [torch.rand_like(p) for p in params]
    sqs = [torch.rand_like(p) for p in params]
    steps = [torch.tensor(3.0) for _ in params]
    check(step, params, grads, avgs, sqs, steps, torch.tensor(64.0), torch.tensor(found_inf))


def test_amp_unscale_and_update_scale():
    def unscale(tensors, found_inf, inv_scale):
        torch._amp_foreach_non_finite_check_and_unscale_(tensors, found_inf, inv_scale)
        return tensors, found_inf

    finite = [torch.randn(3, 4), torch.randn(5).half()]
    check(unscale, finite, torch.zeros(1), torch.tensor([0.5]))
    with_inf = [torch.randn(3), torch.tensor([1.0, float("inf")])]
    check(unscale, with_inf, torch.zeros(1), torch.tensor([0.5]))

    def update(scale, tracker, found_inf, interval):
        return torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, interval)

    for found, tracker, interval in [(0.0, 0, 3), (0.0, 2, 3), (1.0, 2, 3), (0.0, 0, 1)]:
        check(
            update,
            torch.tensor([1024.0]),
            torch.tensor([tracker], dtype=torch.int32),
            torch.tensor([found]),
            interval,
        )


def test_grad_scaler_training_step():
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**10)
        x = torch.randn(8, 4).to(device)
        for step in range(3):
            opt.zero_grad()
            loss = model(x if step != 1 else x * float("inf")).square().mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return [p.detach().cpu() for p in model.parameters()], scaler.get_scale()

    (tpu_params, tpu_scale), (cpu_params, cpu_scale) = run("tpu"), run("cpu")
    assert tpu_scale == cpu_scale
    for a, e in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a, e)
