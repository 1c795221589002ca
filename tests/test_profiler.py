"""torch.profiler on tpu: the engine's compiles, launches and transfers as CPU events, and the
device rows (each program a device ran, with its device time, charged to the op that queued it)
in tables and Chrome traces, as CUDA's kernels are."""

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def device_rows(trace_path):
    events = json.loads(trace_path.read_text())["traceEvents"]
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")], events


@torch_tpu.eager_mode("strict")  # defer_and_fuse compiles and launches at materialisation
def test_compiles_launches_and_transfers_are_events(tmp_path):
    x = torch.randn(13, 29, device="tpu")  # a shape no other test compiles first
    with profile(activities=BOTH) as prof:
        y = torch.special.erfcx(x * 1.25)
        y.sum().item()
    events = {e.key: e for e in prof.key_averages()}
    compiles = [k for k in events if k.startswith("tpu::compile(aten::")]
    assert compiles, sorted(events)
    assert "tpu::launch(aten::special_erfcx)" in events
    assert any(k.startswith("tpu::device_to_host") for k in events)
    # A compile is an event of its own, not the op's own time.
    op = events["aten::special_erfcx"]
    assert op.self_cpu_time_total < op.cpu_time_total
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert "tpu::launch(aten::special_erfcx)" in trace.read_text()


@torch_tpu.eager_mode("strict")
def test_device_time_per_op_and_per_program(tmp_path):
    a = torch.randn(192, 192, device="tpu")
    (a @ a).tanh().cpu()  # compiled before the profile: device time only
    with profile(activities=BOTH) as prof:
        for _ in range(3):
            b = (a @ a).tanh()
        b.cpu()
    events = {e.key: e for e in prof.key_averages()}
    for op in ("aten::mm", "aten::tanh"):
        assert events[op].count == 3
        assert events[op].self_device_time_total > 0, op
        program = events[f"tpu::execute({op})"]
        assert program.count == 3
        assert program.device_time_total == events[op].self_device_time_total
    assert events["aten::matmul"].device_time_total == events["aten::mm"].device_time_total
    assert any(k.startswith("tpu::device_to_host(") for k in events)

    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    rows, events = device_rows(trace)
    programs = [e for e in rows if e["cat"] == "kernel"]
    assert (
        sorted(e["name"] for e in programs)
        == ["tpu::execute(aten::mm)"] * 3 + ["tpu::execute(aten::tanh)"] * 3
    )
    # On the device's own lane, one after another.
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "TPU 0" in names
    starts = sorted(e["ts"] for e in programs)
    ends = sorted(e["ts"] + e["dur"] for e in programs)
    assert all(end <= start + 0.01 for end, start in zip(ends, starts[1:]))  # µs, as floats


@torch_tpu.eager_mode("defer_and_fuse")
def test_a_fused_program_is_charged_to_the_op_that_ran_it():
    # Work an earlier test left pending would run in the profile too. Under load PJRT
    # reports the program done after the read that follows it (it failed 1 time in 200
    # with the cores busy): its row must not depend on that report.
    torch.tpu.synchronize()
    x = torch.randn(64, 31, device="tpu")
    with profile(activities=BOTH) as prof:
        y = (x.sin() * 2 + 1).sum(0)
        y.cpu()
    events = {e.key: e for e in prof.key_averages()}
    seen = {k: (e.count, e.self_device_time_total, e.device_time_total) for k, e in events.items()}
    fused = [k for k in events if k.startswith("tpu::execute(fused program of")]
    assert len(fused) == 1, seen
    assert events[fused[0]].device_time_total > 0, seen
    assert events["aten::sin"].self_device_time_total == 0, seen  # recorded, not run
    copy_ = events["aten::copy_"].self_device_time_total
    assert copy_ >= events[fused[0]].device_time_total, seen


def test_compiled_graphs_have_device_rows():
    f = torch.compile(lambda t: (t.cos() + t).square().mean(1), backend="tpu")
    x = torch.randn(8, 24, device="tpu")
    f(x).cpu()
    with profile(activities=BOTH) as prof:
        f(x).cpu()
    programs = [e for e in prof.key_averages() if e.key.startswith("tpu::execute(")]
    assert programs and all(e.device_time_total > 0 for e in programs)


@pytest.mark.parametrize("activities", [[ProfilerActivity.CPU], None])
def test_device_rows_only_when_asked_for(activities):
    x = torch.randn(17, device="tpu")
    x.exp().cpu()
    with profile(activities=activities or BOTH) as prof:
        x.exp().cpu()
    rows = [e for e in prof.key_averages() if e.key.startswith("tpu::execute(")]
    assert bool(rows) == (activities is None)
