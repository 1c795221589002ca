"""One process of a distributed test group (started by dist_launch.run_group).

``python dist_worker.py SCENARIO ARGS_JSON``, with torchrun's variables set. The
scenario runs many checks in this one process (a process costs seconds to start) and
prints ``RESULT {"failures": [...], ...}``; a failed check is recorded by name and
the scenario goes on, so one run reports every failure.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch_tpu
import collective_inputs
from collective_inputs import make

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.count = 0

    def fail(self, name: str, why: str) -> None:
        self.failures.append(f"{name}: {why}")

    def equal(self, name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        self.count += 1
        actual = actual.cpu()
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            self.fail(
                name,
                f"got {actual.dtype}{list(actual.shape)}, "
                f"expected {expected.dtype}{list(expected.shape)}",
            )
        elif not torch.equal(actual, expected):
            self.fail(
                name,
                f"got {actual.flatten()[:8].tolist()}, expected {expected.flatten()[:8].tolist()}",
            )

    def close(self, name, actual, expected, rtol: float, atol: float) -> None:
        self.count += 1
        try:
            torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=rtol, atol=atol)
        except AssertionError as e:
            self.fail(name, str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4]))

    def true(self, name: str, condition: bool, why: str = "") -> None:
        self.count += 1
        if not condition:
            self.fail(name, why or "condition is false")

    def raises(self, name: str, exc_type: type, match: str, fn) -> None:
        self.count += 1
        try:
            fn()
        except exc_type as e:
            if match not in str(e):
                self.fail(name, f"{type(e).__name__} without {match!r}: {e}")
            return
        except Exception as e:
            self.fail(name, f"raised {type(e).__name__} instead of {exc_type.__name__}: {e}")
            return
        self.fail(name, f"did not raise {exc_type.__name__}")

    def guarded(self, name: str, fn) -> None:
        """Runs a block of checks; an exception in it is one failure."""
        try:
            fn()
        except Exception:
            self.fail(name, traceback.format_exc(limit=6))


# ---------------------------------------------------------------- inputs

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.uint8]
SHAPES = [(), (7,), (3, 5)]


def real(t: torch.Tensor) -> torch.Tensor:
    """What Gloo is given for ``t`` (it carries complex values as real pairs)."""
    return torch.view_as_real(t) if t.is_complex() else t


def name_of(op: str, dtype: torch.dtype, shape) -> str:
    return f"{op}[{str(dtype).removeprefix('torch.')},{list(shape)}]"


# ---------------------------------------------------------------- collectives


REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
    "avg": dist.ReduceOp.AVG,
    "premul_sum": "premul_sum",
}


def reduce_op(name: str):
    return dist._make_nccl_premul_sum(0.5) if name == "premul_sum" else REDUCE_OPS[name]


def reference_reduce(name: str, run, x: torch.Tensor) -> torch.Tensor:
    """``run(input, op) -> output`` on Gloo, with AVG and PREMUL_SUM (which Gloo lacks)
    spelled out as NCCL defines them."""
    if name == "premul_sum":
        return run(x * 0.5, dist.ReduceOp.SUM)
    if name == "avg":
        out = run(x, dist.ReduceOp.SUM)
        if out.dtype.is_floating_point or out.dtype.is_complex:
            return out / WORLD
        return out.div(WORLD, rounding_mode="trunc")
    return run(x, REDUCE_OPS[name])


def reduction_cases():
    return collective_inputs.reduction_cases(FLOATS, INTS, ["max", "min"])


def check_all_reduce(c: Checks, gloo) -> None:
    def on_gloo(u, op):
        u = u.clone()
        dist.all_reduce(u, op=op, group=gloo)
        return u

    for salt, (op, dtype) in enumerate(reduction_cases()):
        for shape in SHAPES:
            x = make(dtype, shape, RANK, salt)
            t = x.to("tpu")
            dist.all_reduce(t, op=reduce_op(op))
            c.equal(name_of(f"all_reduce.{op}", dtype, shape), t, reference_reduce(op, on_gloo, x))


def check_reduce_scatter(c: Checks, gloo) -> None:
    def tensor_on_gloo(u, op):
        if u.is_complex():  # Gloo carries complex values as real pairs
            return torch.view_as_complex(tensor_on_gloo(torch.view_as_real(u), op))
        out = torch.empty(u.shape[0] // WORLD, *u.shape[1:], dtype=u.dtype)
        dist.reduce_scatter_tensor(out, u, op=op, group=gloo)
        return out

    def list_on_gloo(u, op):
        if u.is_complex():
            return torch.view_as_complex(list_on_gloo(torch.view_as_real(u), op))
        out = torch.empty(u.shape[1:], dtype=u.dtype)
        dist.reduce_scatter(out, list(u.unbind(0)), op=op, group=gloo)
        return out

    for salt, (op, dtype) in enumerate(reduction_cases()):
        if op not in ("sum", "max", "avg", "premul_sum"):
            continue
        x = make(dtype, (WORLD * 3, 2), RANK, 100 + salt)
        out = torch.empty(3, 2, dtype=dtype, device="tpu")
        dist.reduce_scatter_tensor(out, x.to("tpu"), op=reduce_op(op))
        expected = reference_reduce(op, tensor_on_gloo, x)
        c.equal(name_of(f"reduce_scatter_tensor.{op}", dtype, (3, 2)), out, expected)

        x = make(dtype, (WORLD, 4), RANK, 200 + salt)
        out = torch.empty(4, dtype=dtype, device="tpu")
        dist.reduce_scatter(out, list(x.to("tpu").unbind(0)), op=reduce_op(op))
        expected = reference_reduce(op, list_on_gloo, x)
        c.equal(name_of(f"reduce_scatter.{op}", dtype, (4,)), out, expected)


MOVE_DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]


def check_data_movement(c: Checks, gloo) -> None:
    for salt, dtype in enumerate(MOVE_DTYPES):
        for shape in SHAPES:
            x = make(dtype, shape, RANK, 300 + salt)

            t = x.to("tpu")
            dist.broadcast(t, src=WORLD - 1)
            ref = x.clone()
            dist.broadcast(ref, src=WORLD - 1, group=gloo)
            c.equal(name_of("broadcast", dtype, shape), t, ref)

            t = x.to("tpu")
            dist.reduce(
                t, dst=0, op=dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM
            )
            if RANK == 0 and dtype != torch.complex64:
                ref = x.clone()
                dist.reduce(
                    ref,
                    dst=0,
                    op=dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM,
                    group=gloo,
                )
                c.equal(name_of("reduce", dtype, shape), t, ref)
            elif dtype != torch.complex64:
                dist.reduce(
                    x.clone(),
                    dst=0,
                    op=dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM,
                    group=gloo,
                )

            outs = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(WORLD)]
            dist.all_gather(outs, x.to("tpu"))
            refs = [torch.empty(shape, dtype=dtype) for _ in range(WORLD)]
            dist.all_gather(refs, x, group=gloo)
            for i in range(WORLD):
                c.equal(name_of(f"all_gather[{i}]", dtype, shape), outs[i], refs[i])

            flat = x.reshape(-1)
            out = torch.empty(WORLD * flat.numel(), dtype=dtype, device="tpu")
            dist.all_gather_into_tensor(out, flat.to("tpu"))
            ref = torch.empty(WORLD * flat.numel(), dtype=dtype)
            dist.all_gather_into_tensor(ref, flat, group=gloo)
            c.equal(name_of("all_gather_into_tensor", dtype, shape), out, ref)

            gathered = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(WORLD)]
            dist.gather(x.to("tpu"), gathered if RANK == 0 else None, dst=0)
            refs = [torch.empty(shape, dtype=dtype) for _ in range(WORLD)]
            dist.gather(real(x), [real(r) for r in refs] if RANK == 0 else None, dst=0, group=gloo)
            if RANK == 0:
                for i in range(WORLD):
                    c.equal(name_of(f"gather[{i}]", dtype, shape), gathered[i], refs[i])

            pieces = [make(dtype, shape, i, 400 + salt) for i in range(WORLD)]
            out = torch.empty(shape, dtype=dtype, device="tpu")
            dist.scatter(out, [p.to("tpu") for p in pieces] if RANK == 0 else None, src=0)
            ref = torch.empty(shape, dtype=dtype)
            dist.scatter(
                real(ref), [real(p) for p in pieces] if RANK == 0 else None, src=0, group=gloo
            )
            c.equal(name_of("scatter", dtype, shape), out, ref)

            ins = [make(dtype, shape, RANK, 500 + salt + i) for i in range(WORLD)]
            outs = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(WORLD)]
            dist.all_to_all(outs, [t.to("tpu") for t in ins])
            refs = [torch.empty(shape, dtype=dtype) for _ in range(WORLD)]
            dist.all_to_all([real(r) for r in refs], [real(t) for t in ins], group=gloo)
            for i in range(WORLD):
                c.equal(name_of(f"all_to_all[{i}]", dtype, shape), outs[i], refs[i])

        # Uneven splits: rank r sends r + 2j + 1 rows to rank j.
        in_splits = [RANK + 2 * j + 1 for j in range(WORLD)]
        out_splits = [j + 2 * RANK + 1 for j in range(WORLD)]
        x = make(dtype, (sum(in_splits), 3), RANK, 600 + salt)
        out = torch.empty(sum(out_splits), 3, dtype=dtype, device="tpu")
        dist.all_to_all_single(out, x.to("tpu"), out_splits, in_splits)
        ref = torch.empty(sum(out_splits), 3, dtype=dtype)
        dist.all_to_all_single(real(ref), real(x), out_splits, in_splits, group=gloo)
        c.equal(name_of("all_to_all_single.uneven", dtype, (sum(out_splits), 3)), out, ref)
        x = make(dtype, (WORLD * 2, 3), RANK, 700 + salt)
        out = torch.empty(WORLD * 2, 3, dtype=dtype, device="tpu")
        dist.all_to_all_single(out, x.to("tpu"))
        ref = torch.empty(WORLD * 2, 3, dtype=dtype)
        dist.all_to_all_single(real(ref), real(x), group=gloo)
        c.equal(name_of("all_to_all_single", dtype, (WORLD * 2, 3)), out, ref)


def check_point_to_point(c: Checks) -> None:
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    for salt, dtype in enumerate([torch.float32, torch.int64, torch.bfloat16]):
        shape = (5, 2)
        mine = make(dtype, shape, RANK, 800 + salt).to("tpu")
        got = torch.empty(shape, dtype=dtype, device="tpu")
        if RANK % 2 == 0:
            dist.send(mine, dst=right)
            dist.recv(got, src=left)
        else:
            dist.recv(got, src=left)
            dist.send(mine, dst=right)
        c.equal(name_of("send/recv", dtype, shape), got, make(dtype, shape, left, 800 + salt))

        got = torch.empty(shape, dtype=dtype, device="tpu")
        works = [dist.irecv(got, src=left), dist.isend(mine, dst=right)]
        for w in works:
            w.wait()
        c.equal(name_of("isend/irecv", dtype, shape), got, make(dtype, shape, left, 800 + salt))

        got = torch.empty(shape, dtype=dtype, device="tpu")
        if RANK % 2 == 0:
            dist.send(mine, dst=right)
            sender = dist.recv(got)  # from any rank
        else:
            sender = dist.recv(got)
            dist.send(mine, dst=right)
        c.true(name_of("recv_anysource.sender", dtype, shape), sender == left, str(sender))
        c.equal(name_of("recv_anysource", dtype, shape), got, make(dtype, shape, left, 800 + salt))

        got = torch.zeros(shape, dtype=dtype, device="tpu")
        ops = [dist.P2POp(dist.isend, mine, right), dist.P2POp(dist.irecv, got, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        c.equal(
            name_of("batch_isend_irecv", dtype, shape), got, make(dtype, shape, left, 800 + salt)
        )


def check_coalesced(c: Checks, gloo) -> None:
    shapes = [(3,), (2, 4), ()]
    xs = [make(torch.float32, s, RANK, 900 + i) for i, s in enumerate(shapes)]
    ts = [x.to("tpu") for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    refs = [x.clone() for x in xs]
    dist.all_reduce_coalesced(refs, group=gloo)  # the same flattened reduction
    for i, s in enumerate(shapes):
        c.equal(name_of("coalesced.all_reduce", torch.float32, s), ts[i], refs[i])

    xs = [make(torch.float32, (n,), RANK, 950 + n) for n in (2, 5)]
    outs = [torch.empty(WORLD * x.numel(), device="tpu") for x in xs]
    with dist._coalescing_manager():
        for out, x in zip(outs, xs):
            dist.all_gather_into_tensor(out, x.to("tpu"))
    for out, x in zip(outs, xs):
        ref = torch.empty(WORLD * x.numel())
        dist.all_gather_into_tensor(ref, x, group=gloo)
        c.equal(name_of("coalesced.all_gather_into_tensor", torch.float32, x.shape), out, ref)

    xs = [make(torch.float32, (WORLD * n,), RANK, 970 + n) for n in (1, 3)]
    outs = [torch.empty(x.numel() // WORLD, device="tpu") for x in xs]
    with dist._coalescing_manager():
        for out, x in zip(outs, xs):
            dist.reduce_scatter_tensor(out, x.to("tpu"))
    for out, x in zip(outs, xs):
        ref = torch.empty(x.numel() // WORLD)
        dist.reduce_scatter_tensor(ref, x, group=gloo)
        c.equal(name_of("coalesced.reduce_scatter_tensor", torch.float32, x.shape), out, ref)

    xs = [make(torch.float32, (3,), RANK, 990), make(torch.float32, (2, 2), RANK, 991)]
    outs = [[torch.empty_like(x, device="tpu") for x in xs] for _ in range(WORLD)]
    dist.all_gather_coalesced(outs, [x.to("tpu") for x in xs])
    refs = [[torch.empty_like(x) for x in xs] for _ in range(WORLD)]
    dist.all_gather_coalesced(refs, xs, group=gloo)
    for i in range(WORLD):
        for j in range(len(xs)):
            c.equal(f"all_gather_coalesced[{i}][{j}]", outs[i][j], refs[i][j])


def check_semantics(c: Checks, gloo) -> None:
    """Views, aliases, async works and futures, objects, DeferAndFuse."""
    base = make(torch.float32, (4, 6), RANK, 1000)
    t = base.to("tpu")
    view = t[1:3]  # a view: the rest of the storage must stay as it was
    dist.all_reduce(view)
    ref = base.clone()
    dist.all_reduce(ref[1:3], group=gloo)
    c.equal("all_reduce.view", t, ref)

    t = base.to("tpu")
    dist.all_reduce(t.t())  # non-contiguous: reduced in its own element order
    ref = base.t().contiguous()
    dist.all_reduce(ref, group=gloo)
    c.equal("all_reduce.transposed", t, ref.t())

    out = torch.zeros(WORLD * 3, 2, device="tpu")
    dist.all_gather(list(out.chunk(WORLD)), base[:3, :2].to("tpu"))
    ref = torch.zeros(WORLD * 3, 2)
    dist.all_gather(list(ref.chunk(WORLD)), base[:3, :2].contiguous(), group=gloo)
    c.equal("all_gather.into_views", out, ref)

    t = base.to("tpu")
    work = dist.all_reduce(t, async_op=True)
    c.true("work.wait", work.wait() is True)
    value = work.get_future().wait()
    c.true("future.value", isinstance(value, list) and value[0] is not None)
    ref = base.clone()
    dist.all_reduce(ref, group=gloo)
    c.equal("all_reduce.async", t, ref)
    c.equal("future.result", value[0], ref)

    # Chained async work on one tensor is ordered like NCCL's stream.
    t = base.to("tpu")
    works = [dist.all_reduce(t, async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
    ref = base.clone()
    for _ in range(3):
        dist.all_reduce(ref, group=gloo)
    c.equal("all_reduce.chained_async", t, ref)

    # A result becomes its tensor's device buffer without a copy (the CPU platform
    # uses the staging memory in place); that memory is staged into again only once
    # no buffer uses it: values kept by clones (which share the buffer) and updated
    # in place between collectives stay right.
    t = base.to("tpu")
    ref = base.clone()
    kept, kept_ref = [], []
    for i in range(4):
        dist.all_reduce(t)
        dist.all_reduce(ref, group=gloo)
        kept.append(t.clone())
        kept_ref.append(ref.clone())
        t.mul_(0.5).add_(i)
        ref.mul_(0.5).add_(i)
    c.equal("all_reduce.staging_memory_reuse", t, ref)
    for i, (k, r) in enumerate(zip(kept, kept_ref)):
        c.equal(f"all_reduce.staging_memory_kept_{i}", k, r)

    # A leaf that requires grad is written like raw memory (DDP's broadcast).
    p = torch.nn.Parameter(base.to("tpu"))
    dist.broadcast(p, src=0)
    ref = base.clone()
    dist.broadcast(ref, src=0, group=gloo)
    c.equal("broadcast.parameter", p.detach(), ref)

    objects = [None] * WORLD
    dist.all_gather_object(objects, {"rank": RANK, "name": f"r{RANK}"})
    c.true(
        "all_gather_object",
        objects == [{"rank": i, "name": f"r{i}"} for i in range(WORLD)],
        str(objects),
    )
    box = [f"from {RANK}"]
    dist.broadcast_object_list(box, src=WORLD - 1)
    c.true("broadcast_object_list", box == [f"from {WORLD - 1}"], str(box))

    cpu = base.clone()
    dist.all_reduce(cpu, op=dist.ReduceOp.AVG)  # CPU tensors through tpu_dist
    ref = base.clone()
    dist.all_reduce(ref, group=gloo)
    c.equal("all_reduce.cpu_tensor_avg", cpu, ref / WORLD)

    dist.barrier()
    c.true("barrier", True)

    with torch_tpu.eager_mode("defer_and_fuse"):
        a = base.to("tpu")
        x = a * 2 + 1  # pending: the collective must materialise it
        dist.all_reduce(x)
        y = x * 3
        out = torch.zeros(WORLD * 6, device="tpu") + 1  # a pending output
        dist.all_gather_into_tensor(out, y[0])
        z = out.sum()
    ref = base * 2 + 1
    dist.all_reduce(ref, group=gloo)
    ref_out = torch.empty(WORLD * 6)
    dist.all_gather_into_tensor(ref_out, ref[0] * 3, group=gloo)
    c.equal("defer_and_fuse.all_reduce", y, ref * 3)
    c.equal("defer_and_fuse.all_gather", out, ref_out)
    c.close("defer_and_fuse.after", z, ref_out.sum(), rtol=1e-6, atol=1e-5)


def check_bad_input(c: Checks) -> None:
    c.raises(
        "int16",
        TypeError,
        "torch.int16",
        lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16, device="tpu")),
    )
    c.raises(
        "complex_max",
        ValueError,
        "complex",
        lambda: dist.all_reduce(
            torch.ones(2, dtype=torch.complex64, device="tpu"), op=dist.ReduceOp.MAX
        ),
    )
    c.raises(
        "bool_avg",
        TypeError,
        "AVG",
        lambda: dist.all_reduce(
            torch.ones(2, dtype=torch.bool, device="tpu"), op=dist.ReduceOp.AVG
        ),
    )
    c.raises(
        "all_gather_into_tensor.size",
        ValueError,
        "expected 3",
        lambda: dist.all_gather_into_tensor(
            torch.empty(WORLD * 3 + 1, device="tpu"), torch.ones(3, device="tpu")
        ),
    )
    c.raises(
        "reduce_scatter_tensor.dtype",
        TypeError,
        "dtypes differ",
        lambda: dist.reduce_scatter_tensor(
            torch.empty(2, device="tpu"), torch.ones(2 * WORLD, dtype=torch.float64, device="tpu")
        ),
    )
    c.raises(
        "mixed_devices",
        ValueError,
        "same device type",
        lambda: dist.all_gather(
            [torch.empty(2, device="tpu")] + [torch.empty(2)] * (WORLD - 1),
            torch.ones(2, device="tpu"),
        ),
    )
    c.raises(
        "all_to_all_single.splits",
        ValueError,
        "all_to_all_single",
        lambda: dist.all_to_all_single(
            torch.empty(WORLD, device="tpu"),
            torch.ones(WORLD, device="tpu"),
            [2] * WORLD,
            [1] * WORLD,
        ),
    )


def scenario_collectives(c: Checks, args: dict) -> dict:
    gloo = dist.new_group(backend="gloo")
    c.true("backend_name", dist.get_backend() == "tpu_dist", dist.get_backend())
    start = time.perf_counter()
    for check in (
        check_all_reduce,
        check_reduce_scatter,
        check_data_movement,
        check_coalesced,
        check_semantics,
    ):
        c.guarded(check.__name__, lambda check=check: check(c, gloo))
    c.guarded("check_point_to_point", lambda: check_point_to_point(c))
    c.guarded("check_bad_input", lambda: check_bad_input(c))
    dist.barrier()
    return {"collectives_seconds": time.perf_counter() - start}


# ---------------------------------------------------------------- training

STEPS = 10
BATCH = 4  # per rank


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def global_batches() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, BATCH * WORLD, 8, generator=g), torch.randn(
        STEPS, BATCH * WORLD, 4, generator=g
    )


def train(model: torch.nn.Module, xs: torch.Tensor, ys: torch.Tensor) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in zip(xs, ys):
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def my_shard(xs: torch.Tensor) -> torch.Tensor:
    return xs[:, RANK * BATCH : (RANK + 1) * BATCH]


def full_params(model: torch.nn.Module) -> list[torch.Tensor]:
    out = []
    for p in model.parameters():
        p = p.detach()
        out.append((p.full_tensor() if hasattr(p, "full_tensor") else p).cpu())
    return out


def scenario_training(c: Checks, args: dict) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    xs, ys = global_batches()
    reference = make_model().to("tpu")
    train(reference, xs, ys)  # one process, the full batch
    expected = full_params(reference)

    ddp_model = make_model().to("tpu")
    ddp = DDP(ddp_model)  # no device_ids
    train(ddp, my_shard(xs), my_shard(ys))
    ddp_params = full_params(ddp_model)
    for i, (p, e) in enumerate(zip(ddp_params, expected)):
        c.close(f"ddp_vs_one_process.param{i}", p, e, rtol=1e-5, atol=1e-6)

    if "dcp_dir" in args:
        c.guarded("dcp_save", lambda: save_checkpoint(args["dcp_dir"]))
    if args.get("skip_fsdp"):
        return {}

    mesh = init_device_mesh("tpu", (WORLD,))
    fsdp_model = make_model().to("tpu")
    for layer in fsdp_model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(fsdp_model, mesh=mesh)
    train(fsdp_model, my_shard(xs), my_shard(ys))
    for i, (p, e) in enumerate(zip(full_params(fsdp_model), ddp_params)):
        c.close(f"fsdp2_vs_ddp.param{i}", p, e, rtol=1e-5, atol=1e-6)

    mixed = make_model().to("tpu")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(mixed, mesh=mesh, mp_policy=policy)
    losses = train(mixed, my_shard(xs), my_shard(ys))
    c.true("fsdp2_mixed.losses_finite", all(math.isfinite(x) for x in losses), str(losses))
    for i, (p, e) in enumerate(zip(full_params(mixed), ddp_params)):
        c.true(f"fsdp2_mixed.param{i}.dtype", p.dtype == torch.float32, str(p.dtype))
        c.close(f"fsdp2_mixed_vs_ddp.param{i}", p, e, rtol=0, atol=3e-2)

    c.guarded("dtensor", lambda: check_dtensor(c, mesh))
    return {}


def check_dtensor(c: Checks, mesh) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    full = make(torch.float32, (WORLD * 2, 3), 0, 1100)
    d = distribute_tensor(full.to("tpu"), mesh, [Shard(0)])
    c.equal("dtensor.local_shard", d.to_local(), full.chunk(WORLD)[RANK])
    c.equal("dtensor.replicate", d.redistribute(mesh, [Replicate()]).to_local(), full)
    c.equal("dtensor.full_tensor_of_op", (d * 2 + 1).full_tensor(), full * 2 + 1)
    c.equal("dtensor.shard1", d.redistribute(mesh, [Shard(1)]).full_tensor(), full)
    from torch.distributed.tensor import DTensor

    mine = make(torch.float32, (2, 3), RANK, 1200)
    partial = DTensor.from_local(mine.to("tpu"), mesh, [Partial()])
    total = sum(make(torch.float32, (2, 3), r, 1200) for r in range(WORLD))
    c.close(
        "dtensor.partial_to_replicate",
        partial.redistribute(mesh, [Replicate()]).to_local(),
        total,
        rtol=1e-6,
        atol=1e-6,
    )


# ---------------------------------------------------------------- checkpoints


def sharded_model(seed: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3)).to(
        "tpu"
    )
    fully_shard(model, mesh=init_device_mesh("tpu", (WORLD,)))
    return model


def save_checkpoint(directory: str) -> None:
    import torch.distributed.checkpoint as dcp

    model = sharded_model(seed=5)
    dcp.save({"model": model.state_dict()}, checkpoint_id=directory)
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    if RANK == 0:
        torch.save(full, os.path.join(directory, "expected.pt"))


def scenario_dcp_load(c: Checks, args: dict) -> dict:
    import torch.distributed.checkpoint as dcp

    model = sharded_model(seed=6)  # other values, and sharded 2-way instead of 4-way
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=args["dir"])
    model.load_state_dict(state["model"])
    expected = torch.load(os.path.join(args["dir"], "expected.pt"))
    for k, v in model.state_dict().items():
        c.equal(f"dcp_4_to_{WORLD}.{k}", v.full_tensor(), expected[k])
    return {}


# ---------------------------------------------------------------- failures


def scenario_faults(c: Checks, args: dict) -> dict:
    """Rank 1 misses a collective of a group given a 3 s timeout, then dies."""
    short = dist.new_group()
    # As TorchTitan sets its timeouts: PyTorch's function serves tpu_dist as it does Gloo.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist.distributed_c10d._set_pg_timeout(timedelta(seconds=3), short)
    other = dist.new_group()
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t, group=other)  # both groups work
    c.equal("faults.warmup", t, torch.full((4,), float(WORLD)))
    if RANK == 1:
        time.sleep(args["sleep"])
        os._exit(0)  # dies without joining `other`'s next collective
    timings = {}
    start = time.monotonic()
    c.raises(
        "timeout",
        dist.DistBackendError,
        "tpu_dist all_reduce failed",
        lambda: dist.all_reduce(t, group=short),
    )
    timings["timeout_seconds"] = time.monotonic() - start

    start = time.monotonic()
    work = dist.all_reduce(t, group=other, async_op=True)
    c.raises(
        "work_wait_timeout",
        dist.DistBackendError,
        "did not complete within 1000 ms",
        lambda: work.wait(timeout=timedelta(seconds=1)),
    )
    timings["wait_timeout_seconds"] = time.monotonic() - start
    start = time.monotonic()
    c.raises("peer_death", dist.DistBackendError, "tpu_dist all_reduce failed", work.wait)
    timings["peer_death_seconds"] = time.monotonic() - start
    try:
        work.wait()
    except dist.DistBackendError as e:
        timings["peer_death_message"] = str(e).splitlines()[0]
    print(
        "RESULT " + json.dumps({"failures": c.failures, "checks": c.count, **timings}), flush=True
    )
    os._exit(0)  # the group has a dead member: skip its teardown


SCENARIOS = {
    "collectives": scenario_collectives,
    "training": scenario_training,
    "dcp_load": scenario_dcp_load,
    "faults": scenario_faults,
}


def main() -> None:
    scenario, args = sys.argv[1], json.loads(sys.argv[2])
    torch.tpu.set_precision("highest")  # float32 exactness against the references
    dist.init_process_group("tpu_dist", timeout=timedelta(seconds=args.get("timeout", 60)))
    c = Checks()
    result = {}
    start = time.perf_counter()
    try:
        result = SCENARIOS[scenario](c, args)
    except Exception:
        c.fail(scenario, traceback.format_exc(limit=8))
    result.update(failures=c.failures, checks=c.count, seconds=time.perf_counter() - start)
    print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
