"""Ray Train's TorchTrainer on tpu: 2 workers, DDP over tpu_dist, Ray's code unchanged.

    python examples/ray_ddp.py [--workers 2] [--epochs 3]

`TorchConfig(backend="tpu_dist")` makes Ray load torch_tpu through `torch_tpu._loader.load()`
(the entry point TorchTPU defines, which Ray's TPU device manager calls) and start the
process group on tpu_dist. The training function is ordinary PyTorch DDP with `.to("tpu")`;
its losses are checked against the same training on the CPU (Gloo). On a TPU slice, Ray's
own TPU scheduling (`ScalingConfig(use_tpu=True, topology=..., accelerator_type=...)`) picks
tpu_dist by itself; it needs a real slice, so this script asks for CPU workers instead.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers", type=int, default=2, help="Ray workers (processes, default: 2)"
    )
    parser.add_argument("--epochs", type=int, default=3, help="passes over the data (default: 3)")
    return parser.parse_args()


# --help answers before the imports below, which take seconds.
ARGS = parse_args() if __name__ == "__main__" else None

import ray
import torch
import torch.nn.functional as F
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer


def batches(epoch: int, rank: int, world: int, steps: int = 4):
    """The epoch's batches for `rank` (the same data for every run)."""
    g = torch.Generator().manual_seed(1000 * epoch)
    w = torch.randn(8, 1, generator=g)
    for step in range(steps * world):
        x = torch.randn(16, 8, generator=g)
        y = x @ w + 0.1 * torch.randn(16, 1, generator=g)
        if step % world == rank:
            yield x, y


def train(config: dict) -> None:
    from torch.nn.parallel import DistributedDataParallel

    import ray.train

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = torch.device(config["device"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(model.to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(config["epochs"]):
        total = torch.zeros((), device=device)
        for x, y in batches(epoch, rank, world):
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
        torch.distributed.all_reduce(total)
        losses.append(total.item() / world)
        ray.train.report({"epoch": epoch, "loss": losses[-1]})
    if rank == 0:
        with open(config["losses_file"], "w") as f:
            json.dump(losses, f)


def run(device: str, workers: int, epochs: int, storage: str) -> list[float]:
    losses_file = os.path.join(storage, f"losses_{device}.json")
    trainer = TorchTrainer(
        train,
        train_loop_config={"device": device, "epochs": epochs, "losses_file": losses_file},
        torch_config=TorchConfig(backend="tpu_dist" if device == "tpu" else "gloo"),
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(storage_path=storage, name=f"ray_ddp_{device}"),
    )
    trainer.fit()
    with open(losses_file) as f:
        return json.load(f)


def main(args: argparse.Namespace) -> None:
    ray.init(num_cpus=args.workers, include_dashboard=False)
    with tempfile.TemporaryDirectory() as storage:
        tpu = run("tpu", args.workers, args.epochs, storage)
        cpu = run("cpu", args.workers, args.epochs, storage)
    ray.shutdown()
    for epoch, (a, b) in enumerate(zip(tpu, cpu)):
        print(f"epoch {epoch}: loss tpu {a:.6f}  cpu {b:.6f}")
    assert len(tpu) == args.epochs and all(
        abs(a - b) <= 1e-3 * max(1.0, abs(b)) for a, b in zip(tpu, cpu)
    ), (tpu, cpu)
    print("ray_ddp: tpu_dist losses match the CPU")


if __name__ == "__main__":
    main(ARGS)
