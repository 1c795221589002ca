"""Scenarios of thread_world.py: each runs in a process of ``TORCH_TPU_NUM_DEVICES`` devices
and returns ``{"failures": [...], ...}``. A failed check is recorded by name and the
scenario goes on, so one run reports every failure."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import collective_inputs
from collective_inputs import make
from thread_world import ranks

import torch_tpu


class Checks:
    """Failures of every rank's checks (threads append to one list)."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.count = 0
        self._lock = threading.Lock()

    def fail(self, name: str, why: str) -> None:
        with self._lock:
            self.failures.append(f"{name}: {why}")

    def close(self, name: str, actual: torch.Tensor, expected: torch.Tensor, rtol=None) -> None:
        rtol_override = rtol
        with self._lock:
            self.count += 1
        actual = actual.cpu()
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            self.fail(name, f"got {actual.dtype}{list(actual.shape)}, "
                            f"expected {expected.dtype}{list(expected.shape)}")  # fmt: skip
            return
        if expected.dtype in (torch.bfloat16, torch.float16):
            rtol, atol = 2e-2, 2e-2
        elif expected.is_floating_point() or expected.is_complex():
            rtol, atol = 1e-5, 1e-5
        else:
            rtol, atol = 0, 0
        if rtol_override is not None:
            rtol, atol = rtol_override, rtol_override / 10
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            self.fail(name, " ".join(str(e).splitlines()[:4]))

    def true(self, name: str, condition: bool, why: str = "") -> None:
        with self._lock:
            self.count += 1
        if not condition:
            self.fail(name, why or "condition is false")

    def guarded(self, name: str, fn, *args) -> None:
        """Runs a block of checks; an exception in it is one failure."""
        try:
            fn(*args)
        except Exception:
            self.fail(name, traceback.format_exc(limit=8))

    def result(self, **extra) -> dict:
        return {"failures": self.failures, "checks": self.count, **extra}


_DYNAMO = threading.Lock()


def compiled_in_turn(fn):
    """``torch.compile(fn, backend="tpu")`` whose calls the rank threads make one at a
    time. Dynamo's frame cache is not safe for threads calling compiled code at once
    (PyTorch segfaults in create_cache_entry); a call only records or appends work (the
    caller reads its results after it, outside the lock), so ranks never wait for each
    other inside it."""
    # Every rank's thread compiles its own graphs of one function (a device each): past
    # Dynamo's recompile limit (its configuration is the thread's) a call would run
    # eagerly inside the lock, its collectives waiting for ranks waiting for the lock.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    compiled_fn = torch.compile(fn, backend="tpu")
    # The group finds its path at its first collective, where every rank must come.
    dist.all_reduce(torch.zeros(1, device="tpu"))

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with _DYNAMO:
            return compiled_fn(*args, **kwargs)

    return call


@contextlib.contextmanager
def eager_mode(mode: str):
    with torch_tpu.eager_mode(mode):
        yield


# ---------------------------------------------------------------- inputs

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]
SHAPES = [(), (7,), (3, 5)]


def name_of(op: str, dtype: torch.dtype, shape, mode: str = "") -> str:
    return f"{mode}:{op}[{str(dtype).removeprefix('torch.')},{list(shape)}]"


def reduce_op(name: str):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(0.5)
    return getattr(dist.ReduceOp, name.upper())


def reference(op: str, xs: list[torch.Tensor]) -> torch.Tensor:
    """The reduction of the ranks' values as NCCL defines it, computed on the CPU."""
    dtype = xs[0].dtype
    if dtype == torch.bool:
        combine = {"sum": torch.logical_or, "max": torch.logical_or, "bor": torch.logical_or,
                   "min": torch.logical_and, "product": torch.logical_and,
                   "band": torch.logical_and, "bxor": torch.logical_xor}[op]  # fmt: skip
        return functools.reduce(combine, xs)
    if op in ("band", "bor", "bxor"):
        combine = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}
        return functools.reduce(combine[op], xs)
    wide = torch.float64 if dtype.is_floating_point else dtype
    if dtype.is_complex:
        wide = torch.complex128
    s = torch.stack([x.to(wide) for x in xs])
    if op == "premul_sum":
        s = torch.stack([(x * 0.5).to(wide) for x in xs])
    if op in ("sum", "premul_sum", "avg"):
        out = s.sum(0)
    elif op == "product":
        out = s.prod(0)
    elif op == "min":
        out = s.amin(0)
    else:
        out = s.amax(0)
    out = out.to(dtype)
    if op == "avg":
        n = len(xs)
        out = (
            out / n
            if (dtype.is_floating_point or dtype.is_complex)
            else out.div(n, rounding_mode="trunc")
        )
    return out.to(dtype)


def reduction_cases():
    return collective_inputs.reduction_cases(
        FLOATS, INTS, ["sum", "max", "min", "product", "band", "bor", "bxor"]
    )


def strided(x: torch.Tensor) -> torch.Tensor:
    """``x`` on tpu as a strided view inside a larger storage (zeros around it)."""
    holder = torch.zeros((*x.shape, 3), dtype=x.dtype, device="tpu")
    view = holder[..., 1]
    view.copy_(x.to("tpu"))
    return view


# ---------------------------------------------------------------- collectives


def check_reductions(c: Checks, rank: int, world: int, mode: str) -> None:
    for salt, (op, dtype) in enumerate(reduction_cases()):
        for shape in SHAPES:
            xs = [make(dtype, shape, r, salt) for r in range(world)]
            expected = reference(op, xs)
            t = xs[rank].to("tpu")
            dist.all_reduce(t, op=reduce_op(op))
            c.close(name_of(f"all_reduce.{op}", dtype, shape, mode), t, expected)
        if dtype in (torch.float32, torch.bfloat16, torch.int64) and op in ("sum", "max"):
            xs = [make(dtype, (4, 3), r, salt) for r in range(world)]
            view = strided(xs[rank])
            dist.all_reduce(view, op=reduce_op(op))
            c.close(name_of(f"all_reduce.{op}.strided", dtype, (4, 3), mode), view,
                    reference(op, xs))  # fmt: skip
            around = view._base if view._base is not None else view
            c.true(name_of("all_reduce.strided.untouched", dtype, (4, 3), mode),
                   bool((around[..., 0].cpu() == 0).all()))  # fmt: skip
        if op in ("sum", "max", "avg", "premul_sum", "bxor"):
            xs = [make(dtype, (world * 3, 2), r, 100 + salt) for r in range(world)]
            out = torch.empty(3, 2, dtype=dtype, device="tpu")
            dist.reduce_scatter_tensor(out, xs[rank].to("tpu"), op=reduce_op(op))
            full = reference(op, xs)
            c.close(name_of(f"reduce_scatter_tensor.{op}", dtype, (3, 2), mode), out,
                    full[rank * 3 : rank * 3 + 3])  # fmt: skip
            xs = [make(dtype, (world, 4), r, 200 + salt) for r in range(world)]
            out = torch.empty(4, dtype=dtype, device="tpu")
            dist.reduce_scatter(out, list(xs[rank].to("tpu").unbind(0)), op=reduce_op(op))
            c.close(name_of(f"reduce_scatter.{op}", dtype, (4,), mode), out,
                    reference(op, xs)[rank])  # fmt: skip
    # Several tensors in one program.
    xs = [[make(torch.float32, (5,), r, 900 + i) for i in range(3)] for r in range(world)]
    ts = [x.to("tpu") for x in xs[rank]]
    dist.all_reduce_coalesced(ts, op=dist.ReduceOp.SUM)
    for i in range(3):
        c.close(name_of(f"all_reduce_coalesced[{i}]", torch.float32, (5,), mode), ts[i],
                reference("sum", [xs[r][i] for r in range(world)]))  # fmt: skip
    # PREMUL_SUM's factor as a tensor on the device.
    xs = [make(torch.float32, (6,), r, 950) for r in range(world)]
    t = xs[rank].to("tpu")
    factor = torch.tensor(0.5, device="tpu")
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    c.close(name_of("all_reduce.premul_sum.tensor_factor", torch.float32, (6,), mode), t,
            reference("premul_sum", xs))  # fmt: skip


MOVE_DTYPES = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int8,
               torch.bool, torch.complex64]  # fmt: skip


def check_data_movement(c: Checks, rank: int, world: int, mode: str) -> None:
    for salt, dtype in enumerate(MOVE_DTYPES):
        for shape in SHAPES:
            xs = [make(dtype, shape, r, 300 + salt) for r in range(world)]
            t = xs[rank].to("tpu")
            dist.broadcast(t, src=world - 1)
            c.close(name_of("broadcast", dtype, shape, mode), t, xs[world - 1])

            if dtype != torch.complex64:
                op = "max" if dtype == torch.bool else "sum"
                t = xs[rank].to("tpu")
                dist.reduce(t, dst=0, op=reduce_op(op))
                c.close(name_of("reduce", dtype, shape, mode), t,
                        reference(op, xs) if rank == 0 else xs[rank])  # fmt: skip

            outs = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(world)]
            dist.all_gather(outs, xs[rank].to("tpu"))
            for i in range(world):
                c.close(name_of(f"all_gather[{i}]", dtype, shape, mode), outs[i], xs[i])

            flat = [x.reshape(-1) for x in xs]
            out = torch.empty(world * flat[0].numel(), dtype=dtype, device="tpu")
            dist.all_gather_into_tensor(out, flat[rank].to("tpu"))
            c.close(name_of("all_gather_into_tensor", dtype, shape, mode), out, torch.cat(flat))

            root = (salt + len(shape)) % world
            outs = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(world)]
            dist.gather(xs[rank].to("tpu"), outs if rank == root else None, dst=root)
            for i in range(world if rank == root else 0):
                c.close(name_of(f"gather[{i}]", dtype, shape, mode), outs[i], xs[i])

            parts = [make(dtype, shape, root, 800 + salt + j) for j in range(world)]
            out = torch.empty(shape, dtype=dtype, device="tpu")
            dist.scatter(out, [p.to("tpu") for p in parts] if rank == root else None, src=root)
            c.close(name_of("scatter", dtype, shape, mode), out, parts[rank])

            ins = [[make(dtype, shape, r, 500 + salt + j) for j in range(world)]
                   for r in range(world)]  # fmt: skip
            outs = [torch.empty(shape, dtype=dtype, device="tpu") for _ in range(world)]
            dist.all_to_all(outs, [x.to("tpu") for x in ins[rank]])
            for i in range(world):
                c.close(name_of(f"all_to_all[{i}]", dtype, shape, mode), outs[i], ins[i][rank])

        # Even splits, then uneven ones (rank r sends r + 2j + 1 rows to rank j), then
        # other uneven ones of the same totals (no new program).
        xs = [make(dtype, (world * 2, 3), r, 700 + salt) for r in range(world)]
        out = torch.empty(world * 2, 3, dtype=dtype, device="tpu")
        dist.all_to_all_single(out, xs[rank].to("tpu"))
        expected = torch.cat([xs[r][rank * 2 : rank * 2 + 2] for r in range(world)])
        c.close(name_of("all_to_all_single", dtype, (world * 2, 3), mode), out, expected)
        for variant in range(2):
            rows = 4 * world
            splits = [[(r + 2 * j + variant) % 4 + (1 if j == world - 1 else 0)
                       for j in range(world)] for r in range(world)]  # fmt: skip
            for r in range(world):  # every rank sends `rows` rows, whatever the splits
                splits[r][-1] += rows - sum(splits[r])
            received = [[splits[r][j] for r in range(world)] for j in range(world)]
            xs = [make(dtype, (rows, 3), r, 600 + salt + variant) for r in range(world)]
            offsets = [[sum(splits[r][:j]) for j in range(world)] for r in range(world)]
            expected = torch.cat([xs[r][offsets[r][rank] : offsets[r][rank] + splits[r][rank]]
                                  for r in range(world)])  # fmt: skip
            out = torch.empty(sum(received[rank]), 3, dtype=dtype, device="tpu")
            if out.shape[0] != rows:  # every rank must hold the same shapes (one program)
                continue
            dist.all_to_all_single(out, xs[rank].to("tpu"), received[rank], splits[rank])
            c.close(name_of(f"all_to_all_single.uneven{variant}", dtype, (rows, 3), mode), out,
                    expected)  # fmt: skip

        # Row counts that differ between ranks (a mixture of experts' dispatch): the ranks
        # agree on padded shapes.
        for variant in range(2):
            splits = [[(r + j + variant) % 3 + 1 for j in range(world)] for r in range(world)]
            received = [[splits[r][j] for r in range(world)] for j in range(world)]
            xs = [make(dtype, (sum(splits[r]), 3), r, 650 + salt) for r in range(world)]
            offsets = [[sum(splits[r][:j]) for j in range(world)] for r in range(world)]
            expected = torch.cat([xs[r][offsets[r][rank] : offsets[r][rank] + splits[r][rank]]
                                  for r in range(world)])  # fmt: skip
            out = torch.empty(sum(received[rank]), 3, dtype=dtype, device="tpu")
            dist.all_to_all_single(out, xs[rank].to("tpu"), received[rank], splits[rank])
            c.close(name_of(f"all_to_all_single.ranks_differ{variant}", dtype, (0, 3), mode),
                    out, expected)  # fmt: skip


def check_groups(c: Checks, rank: int, world: int, mode: str) -> None:
    """Sub-groups: pairs, and every other rank; only members call their group."""
    paired = world - world % 2
    pairs = [dist.new_group([r, r + 1]) for r in range(0, paired, 2)]
    members = list(range(0, world, 2))
    evens = dist.new_group(members) if len(members) > 1 else None
    xs = [make(torch.float32, (5,), r, 1000) for r in range(world)]
    if rank < paired:
        t = xs[rank].to("tpu")
        dist.all_reduce(t, group=pairs[rank // 2])
        pair = rank - rank % 2
        c.close(name_of("pair.all_reduce", torch.float32, (5,), mode), t,
                reference("sum", xs[pair : pair + 2]))  # fmt: skip
    if evens is not None and rank in members:
        t = xs[rank].to("tpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=evens)
        c.close(name_of("evens.all_reduce", torch.float32, (5,), mode), t,
                reference("max", [xs[r] for r in members]))  # fmt: skip
        out = torch.empty(len(members) * 5, device="tpu")
        dist.all_gather_into_tensor(out, xs[rank].to("tpu"), group=evens)
        c.close(name_of("evens.all_gather", torch.float32, (5,), mode), out,
                torch.cat([xs[r] for r in members]))  # fmt: skip
        t = xs[rank].to("tpu")
        dist.broadcast(t, src=members[-1], group=evens)
        c.close(name_of("evens.broadcast", torch.float32, (5,), mode), t, xs[members[-1]])
    dist.barrier()


def check_layouts(c: Checks, rank: int, world: int, mode: str) -> None:
    """Ranks holding their tensors in other layouts (a strided column, a slice inside a
    larger storage, an op's result, a contiguous tensor) still run one program."""
    xs = [make(torch.float32, (5,), r, 3600) for r in range(world)]
    if rank % 3 == 0:
        holder = torch.zeros(5, 3, device="tpu")
        holder[:, 1] = xs[rank].to("tpu")
        t = holder[:, 1]
    elif rank % 3 == 1:
        holder = torch.zeros(9, device="tpu")
        holder[2:7] = xs[rank].to("tpu")
        t = holder[2:7]
    else:
        t = torch.cat([xs[rank][:2], xs[rank][2:]]).to("tpu")
    dist.all_reduce(t)
    c.close(name_of("layouts.all_reduce", torch.float32, (5,), mode), t, reference("sum", xs))
    if rank % 3 != 2:
        c.close(name_of("layouts.holder_kept", torch.float32, (5,), mode),
                holder.sum() - t.sum(), torch.tensor(0.0))  # fmt: skip
    out = torch.empty(2 * world * 5, device="tpu")[world * 5 :] if rank % 2 else None
    out = torch.empty(world * 5, device="tpu") if out is None else out
    dist.all_gather_into_tensor(out, t)
    c.close(name_of("layouts.all_gather", torch.float32, (5,), mode), out,
            reference("sum", xs).repeat(world))  # fmt: skip


def check_point_to_point(c: Checks, rank: int, world: int, mode: str) -> None:
    """send/recv and batch_isend_irecv: a ring in each dtype, a pipeline of blocking
    sends, two ranks sending each other before receiving, strided tensors, several
    messages to one peer (matched in order), and a sub-group's ranks."""
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def ring(sends, recvs, group=None, peers=(nxt, prv)):
        ops = [dist.P2POp(dist.isend, t, peers[0], group) for t in sends]
        ops += [dist.P2POp(dist.irecv, t, peers[1], group) for t in recvs]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64):
        xs = [make(dtype, (4, 3), r, 3000) for r in range(world)]
        out = torch.empty(4, 3, dtype=dtype, device="tpu")
        ring([xs[rank].to("tpu")], [out])
        c.close(name_of("p2p.ring", dtype, (4, 3), mode), out, xs[prv])

    x = make(torch.float32, (6,), 0, 3100)
    t = x.to("tpu") if rank == 0 else torch.empty(6, device="tpu")
    if rank > 0:
        dist.recv(t, src=rank - 1)
        t += 1
    if rank < world - 1:
        dist.send(t, dst=rank + 1)
    else:
        c.close(name_of("p2p.pipeline", torch.float32, (6,), mode), t, x + (world - 1))

    if rank < world - world % 2:
        partner = rank ^ 1
        ys = [make(torch.float32, (2, 5), r, 3200) for r in range(world)]
        got = torch.empty(2, 5, device="tpu")
        sent = dist.isend(ys[rank].to("tpu"), partner)
        dist.recv(got, partner)
        sent.wait()
        c.close(name_of("p2p.both_ways", torch.float32, (2, 5), mode), got, ys[partner])

    zs = [make(torch.float32, (5, 4), r, 3300) for r in range(world)]
    buf = torch.zeros(4, 5, 2, device="tpu")
    ring([zs[rank].to("tpu").t()], [buf[:, :, 1]])
    expected = torch.zeros(4, 5, 2)
    expected[:, :, 1] = zs[prv].t()
    c.close(name_of("p2p.strided", torch.float32, (4, 5, 2), mode), buf, expected)

    parts = [[make(torch.float32, (k + 1,), r, 3400 + k) for k in range(3)] for r in range(world)]
    outs = [torch.empty(k + 1, device="tpu") for k in range(3)]
    ring([p.to("tpu") for p in parts[rank]], outs)
    for k in range(3):
        c.close(name_of(f"p2p.in_order{k}", torch.float32, (k + 1,), mode), outs[k],
                parts[prv][k])  # fmt: skip

    members = list(range(0, world, 2))
    evens = dist.new_group(members)
    if len(members) > 1 and rank in members:
        dist.all_reduce(torch.zeros(1, device="tpu"), group=evens)  # the group finds its path
        me, n = members.index(rank), len(members)
        w = make(torch.float32, (3,), rank, 3500)
        got = torch.empty(3, device="tpu")
        ops = [dist.P2POp(dist.isend, w.to("tpu"), group=evens, group_peer=(me + 1) % n),
               dist.P2POp(dist.irecv, got, group=evens, group_peer=(me - 1) % n)]  # fmt: skip
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        c.close(name_of("p2p.evens", torch.float32, (3,), mode), got,
                make(torch.float32, (3,), members[(me - 1) % n], 3500))  # fmt: skip
    dist.barrier()


def collectives(world: int = 4, modes=("strict", "defer_and_fuse")) -> dict:
    c = Checks()

    def rank_checks(rank: int, mode: str) -> dict:
        before = torch_tpu.metrics()
        c.guarded(f"{mode}:reductions[rank {rank}]", check_reductions, c, rank, world, mode)
        c.guarded(f"{mode}:data movement[rank {rank}]", check_data_movement, c, rank, world, mode)
        c.guarded(f"{mode}:groups[rank {rank}]", check_groups, c, rank, world, mode)
        c.guarded(f"{mode}:layouts[rank {rank}]", check_layouts, c, rank, world, mode)
        c.guarded(f"{mode}:p2p[rank {rank}]", check_point_to_point, c, rank, world, mode)
        return before

    counts = {}
    for mode in modes:
        torch_tpu.metrics.reset() if hasattr(torch_tpu.metrics, "reset") else None
        before = torch_tpu.metrics()
        with eager_mode(mode):
            ranks(world, functools.partial(rank_checks, mode=mode))
        after = torch_tpu.metrics()
        counts[mode] = {
            k: after[k] - before[k] for k in ("program_collectives", "staged_collectives")
        }
        c.true(f"{mode}:nothing staged", counts[mode]["staged_collectives"] == 0,
               str(counts[mode]))  # fmt: skip
        c.true(f"{mode}:collectives in programs", counts[mode]["program_collectives"] > 250 * world,
               str(counts[mode]))  # fmt: skip
    return c.result(counts=counts)


# ---------------------------------------------------------------- compiled


def compiled(world: int = 4) -> dict:
    """Functional collectives inside ``torch.compile(backend="tpu")`` graphs: lowered into
    the graph's program (no graph break, no op-by-op run), values as the CPU computes them."""
    import warnings

    import torch.distributed._functional_collectives as funcol

    c = Checks()

    def step(x, group):
        a = funcol.all_reduce(x * 2, "sum", group)
        g = funcol.all_gather_tensor(x, 0, group)
        r = funcol.reduce_scatter_tensor(g * 3, "avg", 0, group)
        b = funcol.broadcast(x + 1, group.size() - 1, group)
        t = funcol.all_to_all_single(g, None, None, group)
        return a + 1, g, r, b, t

    def rank_checks(rank: int, dtype: torch.dtype) -> dict:
        group = dist.group.WORLD
        xs = [make(dtype, (world, 3), r, 2000) for r in range(world)]
        gathered = torch.cat(xs)
        expected = [
            reference("sum", [x * 2 for x in xs]) + 1,
            gathered,
            reference("avg", [gathered * 3] * world).chunk(world)[rank],
            xs[world - 1] + 1,
            torch.cat([gathered.chunk(world)[rank]] * world),
        ]
        fn = compiled_in_turn(step)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for call in range(3):
                outs = fn(xs[rank].to("tpu"), group)
                for i, (o, e) in enumerate(zip(outs, expected)):
                    c.close(name_of(f"compiled.call{call}.out{i}[rank {rank}]", dtype, ()), o, e)
        by_op = [str(w.message) for w in caught if "op by op" in str(w.message)]
        c.true(f"compiled.no_op_by_op[rank {rank}]", not by_op, "; ".join(by_op))
        return {}

    def explained(rank: int) -> None:
        # explain() runs the function eagerly as well: alone, no rank waits for another.
        x = make(torch.float32, (world, 3), rank, 2000).to("tpu")
        e = torch._dynamo.explain(step)(x, dist.group.WORLD)
        c.true("compiled.no_graph_break", e.graph_break_count == 0 and e.graph_count == 1,
               f"{e.graph_count} graphs, breaks: {e.break_reasons}")  # fmt: skip

    # The ranks meet on the host around the counts: a collective there would count too, at
    # a moment one rank cannot know of another.
    meet = threading.Barrier(world)

    def replays(rank: int) -> None:
        fn = compiled_in_turn(step)
        x = make(torch.float32, (world, 3), rank, 2001).to("tpu")
        fn(x, dist.group.WORLD)[0].cpu()  # captured and run
        meet.wait()
        if rank == 0:
            counts.append(torch_tpu.metrics())
        meet.wait()
        for _ in range(3):
            torch.tpu.synchronize()
            outs = fn(x, dist.group.WORLD)
            outs[0].cpu()
        meet.wait()
        if rank == 0:
            counts.append(torch_tpu.metrics())

    before = torch_tpu.metrics()
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        ranks(world, functools.partial(rank_checks, dtype=dtype))
    after = torch_tpu.metrics()
    staged = after["staged_collectives"] - before["staged_collectives"]
    c.true("compiled.nothing staged", staged == 0, f"{staged} staged")
    ranks(1, explained)
    counts: list = []
    ranks(world, replays)

    def held_messages(rank: int) -> None:
        # Messages still held when a compiled region runs its collectives stay held (a
        # capture would send them again at every replay) and arrive at wait().
        def fresh(x, group):
            return funcol.all_reduce(x * 3, "sum", group)

        fn = compiled_in_turn(fresh)
        for call in range(2):  # the capture, then a replay
            x = make(torch.float32, (world, 3), rank, 2002 + call).to("tpu")
            got = torch.empty(world, 3, device="tpu")
            works = [dist.isend(x, (rank + 1) % world), dist.irecv(got, (rank - 1) % world)]
            out = fn(x, dist.group.WORLD)
            for w in works:
                w.wait()
            xs = [make(torch.float32, (world, 3), r, 2002 + call) for r in range(world)]
            c.close(f"compiled.held_messages.out{call}[rank {rank}]", out,
                    reference("sum", [v * 3 for v in xs]))  # fmt: skip
            c.close(f"compiled.held_messages.got{call}[rank {rank}]", got,
                    xs[(rank - 1) % world])  # fmt: skip

    ranks(world, held_messages)
    # Each call of each rank: one program holding the five collectives.
    programs = counts[1]["executions"] - counts[0]["executions"]
    collectives = counts[1]["program_collectives"] - counts[0]["program_collectives"]
    c.true("compiled.one_program_per_call", programs == 3 * world, f"{programs} programs")
    c.true("compiled.collectives_in_it", collectives == 3 * 5 * world, f"{collectives}")
    return c.result(programs_per_call=programs / (3 * world))


# ---------------------------------------------------------------- training


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab: int = 64, d: int = 32, layers: int = 2, seq: int = 8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList([Block(d, 4) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


STEPS, BATCH, SEQ, VOCAB = 5, 8, 8, 64


def batches():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=g)
    return tokens[..., :-1], tokens[..., 1:]


_INIT = threading.Lock()


def new_model(device: str) -> torch.nn.Module:
    # The CPU generator is the process's: ranks draw their weights one at a time.
    with _INIT:
        torch.manual_seed(0)
        model = TinyTransformer()
    return model.to(device)


def sgd_step(model):
    """A training step of ``model``: cross entropy, SGD with momentum. SGD's updates are
    linear in the gradients, so the order in which ranks' gradients are summed changes
    parameters by rounding only (AdamW divides a key bias's gradient, zero up to
    rounding, by its own magnitude)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def train(model, inputs, targets, device: str) -> list[float]:
    step = sgd_step(model)
    return [float(step(x.to(device), y.to(device)).detach()) for x, y in zip(inputs, targets)]


def full_params(model) -> list[torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
            for p in model.parameters()]  # fmt: skip


def training(world: int = 4, modes=("strict", "defer_and_fuse")) -> dict:
    """DDP and FSDP2 over ``world`` ranks of a small transformer equal training on one
    device with the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    c = Checks()
    inputs, targets = batches()
    per_rank = BATCH // world
    one = new_model("tpu:0")
    reference_losses = train(one, inputs, targets, "tpu:0")
    expected = full_params(one)

    def shard(t, rank):
        return t[:, rank * per_rank : (rank + 1) * per_rank]

    def rank_checks(rank: int, mode: str) -> dict:
        device = f"tpu:{rank}"
        ddp_model = new_model(device)
        ddp = DDP(ddp_model)
        losses = train(ddp, shard(inputs, rank), shard(targets, rank), device)
        for i, (p, e) in enumerate(zip(full_params(ddp_model), expected)):
            c.close(f"{mode}:ddp.param{i}[rank {rank}]", p, e, rtol=1e-4)

        mesh = init_device_mesh("tpu", (world,))
        fsdp = new_model(device)
        for block in fsdp.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(fsdp, mesh=mesh)
        train(fsdp, shard(inputs, rank), shard(targets, rank), device)
        for i, (p, e) in enumerate(zip(full_params(fsdp), expected)):
            c.close(f"{mode}:fsdp2.param{i}[rank {rank}]", p, e, rtol=1e-4)
        return losses

    results = {}
    for mode in modes:
        before = torch_tpu.metrics()
        with eager_mode(mode):
            ranks(world, functools.partial(rank_checks, mode=mode))
        after = torch_tpu.metrics()
        staged = after["staged_collectives"] - before["staged_collectives"]
        c.true(f"{mode}:training.nothing staged", staged == 0, f"{staged} staged")
        results[mode] = after["program_collectives"] - before["program_collectives"]
    return c.result(reference_losses=reference_losses, program_collectives=results)


# ---------------------------------------------------------------- faults


def faults(world: int = 4, seconds: float = 2.0) -> dict:
    """Ranks that issue different collectives, or a rank that does not come, end in an
    error naming the collective and the group in every rank, within the group's timeout."""
    import time

    c = Checks()
    timeout = timedelta(seconds=seconds)
    elapsed: dict = {}

    def raises(name: str, fn, *needles: str) -> float:
        start = time.monotonic()
        try:
            fn()
        except dist.DistBackendError as e:
            text = str(e)
            missing = [n for n in needles if n not in text]
            c.true(name, not missing, f"{missing} not in: {text}")
        except Exception as e:
            c.fail(name, f"raised {type(e).__name__} instead of DistBackendError: {e}")
        else:
            c.fail(name, "did not raise")
        return time.monotonic() - start

    def rank_checks(rank: int) -> None:
        group = dist.new_group(timeout=timeout)
        x = torch.ones(4, device="tpu")
        dist.all_reduce(x, group=group)  # the group's path: in programs
        c.close(f"faults.warmup[rank {rank}]", x, torch.full((4,), float(world)))

        # Rank 0 gathers where the others reduce: every rank learns it at once.
        def different():
            if rank == 0:
                out = torch.empty(4 * world, device="tpu")
                dist.all_gather_into_tensor(out, torch.ones(4, device="tpu"), group=group)
            else:
                dist.all_reduce(torch.ones(4, device="tpu"), group=group)

        elapsed[("different", rank)] = raises(
            f"faults.different[rank {rank}]", different, "ranks launched different programs",
            "tpu_dist all_gather_into_tensor", "tpu_dist all_reduce", f"group '{group.group_name}'",
        )  # fmt: skip

        # The last rank comes late: the others give up after the group's timeout, and
        # it finds their error when it comes.
        def late():
            if rank == world - 1:
                time.sleep(seconds * 1.5)
            dist.all_reduce(torch.ones(4, device="tpu"), group=group)

        elapsed[("late", rank)] = raises(
            f"faults.late[rank {rank}]", late, "tpu_dist all_reduce", "timed out after",
            f"rank(s) {world - 1} did not launch it", f"group '{group.group_name}'",
        )  # fmt: skip

        # The group goes on after both.
        y = torch.full((3,), float(rank), device="tpu")
        dist.all_reduce(y, group=group)
        c.close(f"faults.recovered[rank {rank}]", y, torch.full((3,), float(sum(range(world)))))

        # A message of 4 elements received as one of 5: both ends learn it at once, and
        # the pair goes on.
        if rank < 2:

            def different_message():
                if rank == 0:
                    dist.send(torch.ones(4, device="tpu"), dst=1, group=group)
                else:
                    dist.recv(torch.empty(5, device="tpu"), src=0, group=group)

            elapsed[("different_p2p", rank)] = raises(
                f"faults.different_p2p[rank {rank}]", different_message,
                "ranks launched different programs", "tpu_dist send/recv", "ranks 0 and 1",
                f"group '{group.group_name}'",
            )  # fmt: skip
            z = torch.full((2,), float(rank), device="tpu")
            if rank == 0:
                dist.send(z, dst=1, group=group)
            else:
                dist.recv(z, src=0, group=group)
            c.close(f"faults.p2p_recovered[rank {rank}]", z, torch.zeros(2))

        # A rank that never reaches a new group's first collective.
        fresh = dist.new_group(timeout=timeout)
        if rank != world - 1:
            elapsed[("join", rank)] = raises(
                f"faults.join[rank {rank}]",
                lambda: dist.all_reduce(torch.ones(2, device="tpu"), group=fresh),
                "tpu_dist all_reduce failed", "reached its first collective",
            )  # fmt: skip
        dist.barrier()

    ranks(world, rank_checks)
    for (what, rank), seconds_taken in sorted(elapsed.items()):
        bound = 1.0 if what == "different" else seconds * 3
        c.true(f"faults.{what}.bounded[rank {rank}]", seconds_taken < bound,
               f"{seconds_taken:.2f} s")  # fmt: skip
    return c.result(seconds={f"{w}[{r}]": round(t, 2) for (w, r), t in elapsed.items()})


# ---------------------------------------------------------------- compiled FSDP


def simple_fsdp(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """Every parameter sharded over ``mesh`` and all-gathered where it is used (DTensor, as
    TorchTitan's SimpleFSDP): benchmarks/models.py's, which the benchmark trains too."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from models import shard_parameters

    return shard_parameters(model, mesh)


def compiled_fsdp(world: int = 4, form: str = "simple_fsdp") -> dict:
    """A compiled training step of a small transformer, sharded (``simple_fsdp``: all-
    gathers in the forward, reduce-scatters in the backward) or replicated (``ddp``:
    DistributedDataParallel under compiled autograd with Dynamo's Python reducer, its
    all-reduces traced into the backward): forward, backward, collectives and optimizer
    are one program per rank per step, and train as one device does. (FSDP2's
    ``fully_shard`` cannot be: PyTorch marks its hooks ``torch._dynamo.disable``, so they
    run eagerly between graphs.)"""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel as DDP

    c = Checks()
    inputs, targets = batches()
    per_rank = BATCH // world
    one = new_model("tpu:0")
    reference_losses = train(one, inputs, targets, "tpu:0")
    expected = {n: p.detach().cpu() for n, p in one.named_parameters()}
    programs: dict = {}
    collectives: dict = {}
    meet = threading.Barrier(world)

    def rank_checks(rank: int) -> None:
        device = f"tpu:{rank}"
        if form == "ddp":
            # Dynamo's configuration is the thread's.
            torch._dynamo.config.compiled_autograd = True
            torch._dynamo.config.optimize_ddp = "python_reducer"
            model = DDP(new_model(device))
        else:
            model = simple_fsdp(new_model(device), init_device_mesh("tpu", (world,)))
        run = compiled_in_turn(sgd_step(model))
        xs = inputs[:, rank * per_rank : (rank + 1) * per_rank]
        ys = targets[:, rank * per_rank : (rank + 1) * per_rank]
        for i in range(STEPS):
            x, y = xs[i].to(device), ys[i].to(device)
            torch.tpu.synchronize()
            meet.wait()  # on the host: a collective here would be counted too
            if rank == 0:
                before = torch_tpu.metrics()
            meet.wait()
            loss_value = float(run(x, y).detach())
            meet.wait()
            if rank == 0:
                after = torch_tpu.metrics()
                programs[i] = (after["executions"] - before["executions"]) / world
                collectives[i] = (
                    after["program_collectives"] - before["program_collectives"]
                ) / world
                c.true(f"{form}.nothing_staged[step {i}]",
                       after["staged_collectives"] == before["staged_collectives"])  # fmt: skip
            meet.wait()
            mean = torch.tensor([loss_value], device=device)
            dist.all_reduce(mean, op=dist.ReduceOp.AVG)
            c.close(f"{form}.loss{i}[rank {rank}]", mean.cpu()[0],
                    torch.tensor(reference_losses[i]), rtol=1e-4)  # fmt: skip
        trained = {n.replace("parametrizations.", "").replace(".original", "")
                   .removeprefix("module."): p for n, p in model.named_parameters()}  # fmt: skip
        for name, e in expected.items():
            p = trained[name]
            p = p.full_tensor() if isinstance(p, DTensor) else p
            c.close(f"{form}.{name}[rank {rank}]", p.detach().cpu(), e, rtol=1e-4)

    from torch._dynamo.utils import counters

    counters.clear()
    ranks(world, rank_checks)
    breaks = dict(counters["graph_break"])
    # After the first step (which captures the graphs): one program per rank and step.
    for i in range(1, STEPS):
        c.true(f"{form}.one_program[step {i}]", programs[i] == 1, f"{programs[i]}")
        c.true(f"{form}.collectives_in_it[step {i}]", collectives[i] >= 1, f"{collectives[i]}")
    # Dynamo breaks a training step at backward() and around the optimizer's step (its
    # own graph_break() calls, zero_grad): never at a collective.
    structural = ("Tensor.backward()", "torch._dynamo.graph_break()", "Optimizer.zero_grad")
    others = [r.splitlines()[0] for r in breaks if not any(s in r for s in structural)]
    c.true(f"{form}.no_break_at_collectives", not others, "; ".join(others))
    return c.result(
        reference_losses=reference_losses,
        programs_per_rank=programs,
        collectives_per_rank=collectives,
        graph_breaks={r.splitlines()[0]: n for r, n in breaks.items()},
    )
