"""Inputs of the collectives' checks (dist_worker.py's processes, thread_world_checks.py's
threads): a rank's values, the same in every process and thread."""

import torch


def make(dtype: torch.dtype, shape, rank: int, salt: int) -> torch.Tensor:
    """The values of (rank, salt), small enough for products."""
    g = torch.Generator().manual_seed(7919 * salt + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 0.5 + 1).to(dtype)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=g).to(dtype)


def reduction_cases(floats, ints, bool_ops):
    """(ReduceOp name, dtype) of every reduction the dtypes have."""
    for dtype in floats:
        for op in ["sum", "product", "min", "max", "avg", "premul_sum"]:
            yield op, dtype
    for dtype in ints:
        for op in ["sum", "product", "min", "max", "band", "bor", "bxor", "avg"]:
            yield op, dtype
    for op in bool_ops:
        yield op, torch.bool
    yield "sum", torch.complex64
    yield "avg", torch.complex64
