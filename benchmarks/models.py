"""The benchmarks' workloads: a small transformer (4 layers, width 256, sequence 128)
and the MLP and CNN of the foundation tests, each with a seeded batch factory. Plain
PyTorch (no torch_tpu), so that the peers' processes (``peers.py``), which run another
torch, train the same models on the same batches."""

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, vocab=256, width=256, layers=4, heads=4, seq=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        seq = idx.shape[1]
        mask = torch.full((seq, seq), float("-inf"), device=idx.device).triu(1)
        x = self.emb(idx) + self.pos[:seq]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x)).flatten(0, 1)


def mlp():
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10)
    )


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.SiLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def workloads(batch: int):
    """name -> (model factory, batch factory); batches are drawn from a seeded CPU
    generator so both modes see the same data."""

    def tokens(g):
        idx = torch.randint(0, 256, (batch, 128), generator=g)
        return idx, torch.randint(0, 256, (batch * 128,), generator=g)

    return {
        "transformer": (Transformer, tokens),
        "mlp": (
            mlp,
            lambda g: (torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)),
        ),
        "cnn": (
            cnn,
            lambda g: (
                torch.randn(8, 3, 16, 16, generator=g),
                torch.randint(0, 10, (8,), generator=g),
            ),
        ),
    }


class _Gathered(nn.Module):
    """A parametrization: the parameter is stored as its shard (a DTensor) and
    all-gathered where it is used; its gradient is reduce-scattered (averaged) back."""

    def forward(self, sharded):
        from torch.distributed.tensor import Partial, Replicate

        full = sharded.redistribute(placements=[Replicate()])
        return full.to_local(grad_placements=[Partial("avg")])


def shard_parameters(model: nn.Module, mesh) -> nn.Module:
    """Fully sharded data parallelism written with DTensor, as TorchTitan's SimpleFSDP:
    the form of FSDP that torch.compile traces whole (forward with its all-gathers,
    backward with its reduce-scatters). Every parameter is sharded along dim 0 over
    ``mesh`` (its size must divide by the mesh's)."""
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.nn.utils import parametrize

    for module in list(model.modules()):
        for name, p in list(module.named_parameters(recurse=False)):
            sharded = nn.Parameter(distribute_tensor(p.data, mesh, [Shard(0)]))
            module.register_parameter(name, sharded)
            parametrize.register_parametrization(module, name, _Gathered(), unsafe=True)
    return model
