"""Trains a small CNN on synthetic data on the ``tpu`` device.

Prints the platform, the loss of every step, steps per second and the backend's metrics.
Run with ``make demo`` (or ``python examples/train_demo.py``).
"""

import argparse
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps (default: 30)")
    parser.add_argument("--batch", type=int, default=32, help="images per step (default: 32)")
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import torch
import torch.nn.functional as F

import torch_tpu


def model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def main(args: argparse.Namespace) -> None:
    device = torch.device("tpu")
    print(
        f"platform: {torch_tpu.platform()} ({torch.tpu.get_device_name()}), "
        f"{torch.tpu.device_count()} device(s)"
    )
    torch.manual_seed(0)
    net = model().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3)

    # A fixed synthetic task: each class is a random pattern seen through noise.
    g = torch.Generator().manual_seed(0)
    patterns = torch.randn(10, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (args.batch * 4,), generator=g)
    images = patterns[labels] + 2.0 * torch.randn(args.batch * 4, 3, 32, 32, generator=g)

    start = None
    for step in range(args.steps):
        if step == 2:  # the first steps compile; time the steady state
            torch.tpu.synchronize()
            start = time.perf_counter()
        i = (step % 4) * args.batch
        x, y = images[i : i + args.batch].to(device), labels[i : i + args.batch].to(device)
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        print(f"step {step:3d}  loss {loss.item():.4f}")
    torch.tpu.synchronize()
    if start is not None:
        elapsed = time.perf_counter() - start
        print(f"steps/s: {(args.steps - 2) / elapsed:.2f} (steady state, batch {args.batch})")
    print(torch_tpu.metrics_report())


if __name__ == "__main__":
    main(ARGS)
