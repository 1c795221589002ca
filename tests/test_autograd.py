"""Autograd's API on tpu against the CPU: grad(), higher order, retain_graph, hooks,
no_grad / inference_mode, detach_, gradient accumulation, activation checkpointing."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def _pair(*shape, seed=0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x.clone().requires_grad_(), x.to("tpu").requires_grad_()


def _close(tpu, cpu, **tol):
    torch.testing.assert_close(tpu.cpu(), cpu, **tol)


def test_autograd_grad_and_higher_order():
    cpu, tpu = _pair(5)
    for x in (cpu, tpu):
        y = (x.sin() * x.exp()).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
        x.got = (g.detach(), h)
    _close(tpu.got[0], cpu.got[0])
    _close(tpu.got[1], cpu.got[1])


def test_retain_graph_and_accumulation():
    cpu, tpu = _pair(3, 4)
    for x in (cpu, tpu):
        y = (x * x).tanh().sum()
        y.backward(retain_graph=True)
        y.backward()
    _close(tpu.grad, cpu.grad)
    tpu2 = torch.randn(3, device="tpu", requires_grad=True)
    (tpu2 * 2).sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y = (tpu2.exp()).sum()
        y.backward()
        y.backward()


def test_gradient_accumulation_over_micro_batches():
    torch.manual_seed(0)
    cpu = torch.nn.Linear(6, 3)
    tpu = torch.nn.Linear(6, 3)
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    data = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(1))
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        for micro in data:
            (model(micro.to(device)).pow(2).mean() / len(data)).backward()
    _close(tpu.weight.grad, cpu.weight.grad)
    _close(tpu.bias.grad, cpu.bias.grad)


def test_tensor_and_module_hooks():
    seen = {}
    for x, device in zip(_pair(4), ("cpu", "tpu")):
        x.register_hook(lambda g: g * 3)
        lin = torch.nn.Linear(4, 2).to(device)
        lin.weight.data.fill_(0.5)
        lin.bias.data.zero_()
        grads_out = []
        lin.register_full_backward_hook(lambda m, gi, go, out=grads_out: out.append(go[0]))
        acc = []
        lin.weight.register_post_accumulate_grad_hook(lambda p, acc=acc: acc.append(p.grad.clone()))
        lin(x.unsqueeze(0)).sum().backward()
        seen[device] = (x.grad, grads_out[0], acc[0])
    for a, b in zip(seen["tpu"], seen["cpu"]):
        _close(a, b)


def test_no_grad_inference_mode_and_detach():
    x = torch.randn(3, device="tpu", requires_grad=True)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad
    with torch.inference_mode():
        z = x * 2
    assert z.is_inference() and not z.requires_grad
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (x * z).sum().backward()
    w = x * 3
    w.detach_()
    assert not w.requires_grad and w.grad_fn is None
    v = x.detach()
    v.add_(1)  # shares storage with x
    _close(x.detach(), v.cpu())
    with torch.enable_grad():
        assert (x * 1).requires_grad


def test_activation_checkpointing_matches_cpu():
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
    tpu_block = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8)
    ).to("tpu")
    tpu_block.load_state_dict(block.state_dict())
    cpu, tpu = _pair(2, 8)
    checkpoint(block, cpu, use_reentrant=False).sum().backward()
    checkpoint(tpu_block, tpu, use_reentrant=False).sum().backward()
    _close(tpu.grad, cpu.grad)
    _close(tpu_block[0].weight.grad, block[0].weight.grad)


def test_functional_jacobian_and_vjp():
    def f(x):
        return F.softplus(x) * x.cos()

    cpu, tpu = _pair(4)
    jc = torch.autograd.functional.jacobian(f, cpu.detach())
    jt = torch.autograd.functional.jacobian(f, tpu.detach())
    _close(jt, jc)
    _, vc = torch.autograd.functional.vjp(f, cpu.detach(), torch.ones(4))
    _, vt = torch.autograd.functional.vjp(f, tpu.detach(), torch.ones(4, device="tpu"))
    _close(vt, vc)
