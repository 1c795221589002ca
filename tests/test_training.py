"""Training on tpu matches training on the CPU step by step, runs natively (no CPU
fallback) and stops compiling after the first steps."""

import copy

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

STEPS = 20


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.GELU(),
        torch.nn.Linear(64, 10),
    )


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.SiLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 10),
    )


def batches(kind, n):
    g = torch.Generator().manual_seed(1)
    shape = (16, 32) if kind == "mlp" else (8, 3, 16, 16)
    return [
        (torch.randn(shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g))
        for _ in range(n)
    ]


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
}


def train(model, make_opt, data, device, on_step=None):
    model = model.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step:
            on_step(step)
    return losses, model


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_matches_cpu(kind, optimizer):
    torch.manual_seed(0)
    model = mlp() if kind == "mlp" else cnn()
    data = batches(kind, STEPS)
    cpu_losses, cpu_model = train(copy.deepcopy(model), OPTIMIZERS[optimizer], data, "cpu")

    compiles = {}
    start = torch_tpu.metrics()

    def record(step):
        compiles[step] = torch_tpu.metrics()["compiles"]

    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        tpu_losses, tpu_model = train(
            copy.deepcopy(model), OPTIMIZERS[optimizer], data, "tpu", on_step=record
        )
    end = torch_tpu.metrics()

    for step, (a, e) in enumerate(zip(tpu_losses, cpu_losses)):
        assert abs(a - e) <= 1e-4 * abs(e), f"step {step}: tpu loss {a} vs cpu {e}"
    for (name, p_tpu), p_cpu in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_tpu.cpu(), p_cpu, rtol=1e-4, atol=1e-5, msg=name)
    fallbacks = {
        op: n - start["fallbacks"].get(op, 0)
        for op, n in end["fallbacks"].items()
        if n != start["fallbacks"].get(op, 0)
    }
    assert not fallbacks, f"CPU fallbacks in the training loop: {fallbacks}"
    assert compiles[STEPS - 1] == compiles[1], (
        f"programs compiled after step 2: {compiles[STEPS - 1] - compiles[1]}"
    )
