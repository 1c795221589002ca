"""The ``tpu`` device as PyTorch sees it: loading, tensors and modules on it, factories,
``torch.tpu``, ``torch.accelerator``, errors."""

import os
import subprocess
import sys
import tempfile
import textwrap

import warnings

import pytest
import torch

import torch_tpu

PLATFORM = torch_tpu.platform()
cpu_platform_only = pytest.mark.skipif(
    PLATFORM != "cpu", reason="TORCH_TPU_NUM_DEVICES sets the device count of the cpu platform only"
)


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        check=False,
    )


# ---------------------------------------------------------------- loading


def test_import_torch_alone_loads_the_backend():
    # A separate lock directory: this process already holds the device.
    out = run_python(
        """
        import sys, torch
        assert "torch_tpu" in sys.modules
        x = torch.ones(2, device="tpu")
        print(torch.tpu.is_available(), x.device, (x + x).cpu().tolist())
        """,
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "autoload"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "tpu:0", "[2.0,", "2.0]"]


def test_import_torch_tpu_first():
    out = run_python(
        """
        import torch_tpu, torch
        print(torch.tpu.device_count(), torch_tpu.platform())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(torch.tpu.device_count()), PLATFORM]


def test_bad_settings_warn_at_import_and_raise_at_first_use():
    # Autoload must never break `import torch`: a bad value is warned about, not applied,
    # and raised at the first use of a device. One process for the three variables.
    problems = [  # in the order of import
        "TORCH_TPU_FALLBACK='Bogus' is not one of warn, silent, error",
        "TORCH_TPU_PRECISION='Bogus' is not one of DEFAULT, HIGH, HIGHEST",
        "TORCH_TPU_EAGER_MODE='Bogus' is not one of strict, debug, defer_and_fuse",
    ]
    out = run_python(
        """
        import torch, torch_tpu
        print("IMPORTED", torch_tpu.get_eager_mode().value, torch.tpu.get_precision().name)
        for first_use in (lambda: torch.ones(1, device="tpu"), torch.tpu.init):
            try:
                first_use()
                print("no error")
            except ValueError as e:
                print("ValueError:", e)
        """,
        TORCH_TPU_PRECISION="Bogus",
        TORCH_TPU_EAGER_MODE="Bogus",
        TORCH_TPU_FALLBACK="Bogus",
        TORCH_TPU_DEFER_AND_FUSE="",
        TPU_LAUNCH_BLOCKING="",
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "bad-settings"),
    )
    assert out.returncode == 0, out.stderr
    for problem in problems:
        assert out.stderr.count(f"UserWarning: {problem}") == 1, out.stderr
    assert "IMPORTED strict DEFAULT" in out.stdout
    assert out.stdout.count(f"ValueError: {'; '.join(problems)}") == 2, out.stdout


def test_backend_registration():
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    assert torch.tpu is sys.modules["torch_tpu.device_module"]
    assert torch.backends.tpu.is_available()
    assert torch.backends.tpu.allow_excess_precision is False
    assert PLATFORM == torch_tpu._platform.select().platform


def test_torchtpu_loader_entry_points():
    # What integrations written for TorchTPU call (Ray Train's TPU backend: load()).
    code = (
        "import torch_tpu._loader as loader, torch, torch.distributed as dist; "
        "loader.load(); loader._init_device('tpu'); "
        "assert 'tpu_dist' in dist.Backend.backend_list and hasattr(torch, 'tpu'); "
        "assert not torch.tpu.is_initialized()\n"
        "try: loader._init_device('xla')\n"
        "except ValueError as e: print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "registers the 'tpu' device type, not 'xla'" in out.stdout


# ---------------------------------------------------------------- tensors & modules


def test_tensor_moves_and_methods():
    x = torch.arange(6.0).reshape(2, 3)
    for y in (x.to("tpu"), x.tpu(), x.to(torch.device("tpu", 0)), x.to(device="tpu:0")):
        assert y.is_tpu and y.device == torch.device("tpu:0")
        assert torch.equal(y.cpu(), x)
    assert not x.is_tpu
    assert x.to("tpu").to("tpu") is not None
    assert x.to("tpu", torch.float64).dtype == torch.float64
    assert x.to("tpu").double().cpu().dtype == torch.float64


def test_module_to_tpu_keeps_parameters_and_buffers():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model.to("tpu")
    for p in model.parameters():
        assert p.is_tpu and isinstance(p, torch.nn.Parameter)
    for b in model.buffers():
        assert b.is_tpu
    model.cpu()
    assert not model[0].weight.is_tpu
    model.tpu()
    assert model[0].weight.is_tpu


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(2, 3, device="tpu"),
        lambda: torch.zeros(2, 3, device="tpu"),
        lambda: torch.ones(2, 3, device="tpu", dtype=torch.int32),
        lambda: torch.full((2, 3), 7.5, device="tpu"),
        lambda: torch.arange(5, device="tpu"),
        lambda: torch.arange(1.0, 2.0, 0.25, device="tpu"),
        lambda: torch.linspace(-1, 1, 7, device="tpu"),
        lambda: torch.eye(3, device="tpu"),
        lambda: torch.eye(2, 4, device="tpu"),
        lambda: torch.rand(3, 4, device="tpu"),
        lambda: torch.randn(3, 4, device="tpu"),
        lambda: torch.randint(0, 10, (3, 4), device="tpu"),
        lambda: torch.zeros_like(torch.ones(2, device="tpu")),
        lambda: torch.ones_like(torch.ones(2, device="tpu")),
        lambda: torch.empty_like(torch.ones(2, device="tpu")),
        lambda: torch.full_like(torch.ones(2, device="tpu"), 3),
        lambda: torch.rand_like(torch.ones(2, device="tpu")),
        lambda: torch.randn_like(torch.ones(2, device="tpu")),
        lambda: torch.randint_like(torch.ones(2, device="tpu"), 5),
    ],
)
def test_factories(make, no_fallback):
    t = make()
    assert t.is_tpu
    t.cpu()


def test_factory_values_match_cpu():
    for fn in (
        lambda d: torch.zeros(2, 3, device=d),
        lambda d: torch.full((2,), 2.5, device=d, dtype=torch.float64),
        lambda d: torch.arange(-3, 9, 2, device=d),
        lambda d: torch.arange(0.0, 1.0, 0.1, device=d),
        lambda d: torch.linspace(0, 10, 11, device=d),
        lambda d: torch.linspace(-2.5, 3.5, 5, device=d, dtype=torch.float64),
        lambda d: torch.eye(4, 3, device=d, dtype=torch.int64),
    ):
        torch.testing.assert_close(fn("tpu").cpu(), fn("cpu"))


def test_random_factories_are_in_range_and_reproducible():
    torch.tpu.manual_seed(123)
    a = torch.rand(1000, device="tpu").cpu()
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    n = torch.randn(10000, device="tpu").cpu()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    r = torch.randint(3, 7, (1000,), device="tpu").cpu()
    assert r.min() == 3 and r.max() == 6
    torch.tpu.manual_seed(123)
    assert torch.equal(torch.rand(1000, device="tpu").cpu(), a)
    assert not torch.equal(torch.rand(1000, device="tpu").cpu(), a)


def test_rng_state_round_trip():
    torch.manual_seed(7)  # seeds the tpu generators too
    state = torch.tpu.get_rng_state()
    first = torch.randn(5, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(5, device="tpu").cpu(), first)
    assert torch.tpu.initial_seed() == 7
    torch.tpu.manual_seed_all(9)
    assert torch.tpu.initial_seed() == 9
    torch.tpu.seed()
    assert torch.tpu.initial_seed() != 9
    g = torch.Generator(device="tpu")
    g.manual_seed(1)
    x = torch.rand(3, device="tpu", generator=g).cpu()
    g.manual_seed(1)
    assert torch.equal(torch.rand(3, device="tpu", generator=g).cpu(), x)


# ---------------------------------------------------------------- torch.tpu


def test_device_module_queries():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    torch.tpu.synchronize()
    if PLATFORM != "tpu":  # a TPU's name is its product name ("TPU v6e")
        assert torch.tpu.get_device_name().endswith(f"({PLATFORM} platform)")
    props = torch.tpu.get_device_properties(0)
    assert props.name == torch.tpu.get_device_name(0)
    assert props.total_memory > 0
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


@pytest.mark.parametrize(
    "platform, kind, name",
    [
        ("tpu", "TPU v4", "TPU v4"),
        ("tpu", "TPU v5 lite", "TPU v5e"),
        ("tpu", "TPU v5", "TPU v5p"),
        ("tpu", "TPU v6 lite", "TPU v6e"),
        ("tpu", "TPU7x", "TPU v7x"),
        ("cuda", "NVIDIA H200", "NVIDIA H200 (cuda platform)"),
        ("cpu", "cpu", "XLA CPU (cpu platform)"),
    ],
)
def test_device_names_carry_the_product_name(platform, kind, name):
    """Frameworks look the name up (TorchTitan's peak FLOPS for MFU matches "v6e", "H200")."""
    from torch_tpu.device_module import _device_name

    assert _device_name(platform, kind) == name


def test_memory_statistics():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.empty(1024, 1024, device="tpu")
    assert torch.tpu.memory_allocated() == before + 4 * 1024 * 1024
    assert torch.tpu.max_memory_allocated() >= before + 4 * 1024 * 1024
    assert torch.tpu.memory_stats()["allocated_bytes.all.current"] == before + 4 * 1024 * 1024
    del x
    assert torch.tpu.memory_allocated() == before
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    torch.tpu.empty_cache()


def test_torch_accelerator_sees_tpu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == 1
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.synchronize()
    x = torch.empty(256, device="tpu")
    assert torch.accelerator.memory_allocated() >= 1024
    del x


# ---------------------------------------------------------------- errors


def test_mixing_devices_is_an_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([torch.ones(2, device="tpu"), torch.ones(2)])


def test_mixed_devices_get_the_ops_own_message():
    """As on CUDA, an op that words its own device check says it first."""
    x, i = torch.randn(3, 4), torch.tensor([0, 2], device="tpu")
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu .* tensor \(cpu\)"):
        x[i]
    with pytest.raises(RuntimeError, match="Input 0 is on device cpu and input 1 is on device tpu"):
        torch.block_diag(torch.ones(2, 2), torch.ones(2, 2, device="tpu"))
    # CPU indices of a tpu tensor are allowed, as for CUDA tensors.
    torch.testing.assert_close(x.to("tpu")[i.cpu()].cpu(), x[[0, 2]])


def test_missing_device_index_is_an_error():
    with pytest.raises(RuntimeError, match="tpu:3 does not exist"):
        torch.zeros(2, device="tpu:3")
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.tpu.set_device(5)


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="tpu does not support dtype"):
        torch.empty(2, dtype=torch.float8_e4m3fn, device="tpu")


def test_second_process_gets_a_clear_error_naming_the_holder():
    torch.ones(1, device="tpu").cpu()  # this process holds tpu:0
    out = run_python(
        """
        import torch
        try:
            torch.ones(1, device="tpu").cpu()
        except RuntimeError as e:
            print("ERROR", e)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ERROR" in out.stdout
    assert f"in use by process {os.getpid()}" in out.stdout


def test_missing_plugin_is_reported_on_first_use_not_at_import():
    out = run_python(
        """
        import torch
        print("imported", torch.tpu.is_available())
        try:
            torch.ones(1, device="tpu")
        except RuntimeError as e:
            print("ERROR", e)
        """,
        TORCH_TPU_PLUGIN="/nonexistent/plugin.so",
    )
    assert out.returncode == 0, out.stderr
    assert "imported False" in out.stdout
    assert "TORCH_TPU_PLUGIN=/nonexistent/plugin.so does not exist" in out.stdout


def test_queries_and_seeding_start_no_backend(tmp_path):
    # What PyTorch calls in programs that never touch a tpu tensor (torch.manual_seed seeds
    # every registered backend) takes neither the device nor its lock, as with CUDA.
    out = run_python(
        """
        import os, torch
        torch.manual_seed(0)
        torch.random.seed()
        count = torch.tpu.device_count(), torch.tpu.is_available(), torch.accelerator.device_count()
        torch.tpu.manual_seed_all(1)
        torch.tpu.get_rng_state()
        print(count, torch.tpu.is_initialized(), os.listdir(os.environ["TORCH_TPU_LOCK_DIR"]))
        torch.ones(1, device="tpu").cpu()
        print(torch.tpu.is_initialized(), os.listdir(os.environ["TORCH_TPU_LOCK_DIR"]))
        """,
        TORCH_TPU_LOCK_DIR=str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"({torch.tpu.device_count()}, True, {torch.tpu.device_count()}) False []",
        f"True ['torch_tpu-{PLATFORM}-0.lock']",
    ]


def test_a_plugin_that_cannot_start_raises_on_each_use(tmp_path):
    not_a_plugin = tmp_path / "plugin.so"
    not_a_plugin.write_text("not a shared object")
    out = run_python(
        """
        import torch
        for attempt in range(2):
            try:
                torch.zeros(1, device="tpu")
            except RuntimeError as e:
                print("ERROR", e)
        """,
        TORCH_TPU_PLUGIN=str(not_a_plugin),
    )
    assert out.returncode == 0, out.stderr
    errors = out.stdout.splitlines()
    assert len(errors) == 2 and errors[0] == errors[1], out.stdout
    assert errors[0].startswith(f"ERROR the tpu device could not start on the {PLATFORM} platform")
    assert f"(PJRT plugin {not_a_plugin}): cannot load PJRT plugin" in errors[0]


def test_cuda_platform_without_visible_gpus_counts_none_without_starting():
    out = run_python(
        """
        import torch
        torch.manual_seed(0)
        print(torch.tpu.device_count(), torch.tpu.is_available(), torch.tpu.is_initialized())
        """,
        TORCH_TPU_PLATFORM="cuda",
        TORCH_TPU_PLUGIN=torch_tpu._platform.select().plugin,
        CUDA_VISIBLE_DEVICES="",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False", "False"]


def test_a_process_forked_after_the_start_gets_a_clear_error_not_a_hang(tmp_path):
    # As CUDA: the child raises at its first device use (the plugin's threads stayed with
    # the parent); freeing inherited tensors and seeding still work; the parent goes on.
    out = run_python(
        """
        import gc, os, torch
        x = torch.ones(2, device="tpu") + 1
        x.cpu()
        pid = os.fork()
        if pid == 0:
            try:
                msg = f"child: {torch.tpu._is_in_bad_fork()} {torch.tpu.device_count()}"
                del x
                gc.collect()
                torch.manual_seed(1)
                try:
                    torch.ones(2, device="tpu") + 1
                    msg += " no error"
                except RuntimeError as e:
                    msg += " " + str(e).split(":")[0]
                print(msg, flush=True)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("parent:", torch.tpu._is_in_bad_fork(), (x + 1).cpu().tolist())
        """,
        TORCH_TPU_LOCK_DIR=str(tmp_path),  # this process may hold the device
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"child: True {torch.tpu.device_count()} Cannot re-initialize tpu in forked subprocess",
        "parent: False [3.0, 3.0]",
    ]


def test_dataloader_workers_beside_device_work(tmp_path):
    out = run_python(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        weight = torch.ones(4, device="tpu")
        total = torch.zeros(4, device="tpu")
        data = TensorDataset(torch.arange(32.0).reshape(8, 4))
        for (batch,) in DataLoader(data, batch_size=2, num_workers=2):
            total += (batch.to("tpu") * weight).sum(0)
        print(total.cpu().tolist())
        """,
        TORCH_TPU_LOCK_DIR=str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[112.0, 120.0, 128.0, 136.0]"


@torch_tpu.eager_mode("strict")  # asynchronous one-op launches (debug raises at the op)
def test_asynchronous_failure_names_the_op():
    x = torch.ones(4, device="tpu")
    torch_tpu._C._poison_storage(x, "injected device failure")
    y = x.clone()  # launches; the failure is only known later
    with pytest.raises(RuntimeError, match="aten::clone failed on tpu.*injected device failure"):
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="produced by .*aten::clone.*injected device failure"):
        y.cpu()


def test_launch_blocking_raises_at_the_op():
    out = run_python(
        """
        import torch, torch_tpu
        x = torch.ones(4, device="tpu")
        torch_tpu._C._poison_storage(x, "boom")
        try:
            x.clone()
            print("no error")
        except RuntimeError as e:
            print("ERROR", e)
        """,
        TPU_LAUNCH_BLOCKING="1",
        TORCH_TPU_EAGER_MODE="",  # the suite's own mode would take precedence
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "blocking"),
    )
    assert out.returncode == 0, out.stderr
    assert "ERROR asynchronous execution of aten::clone failed" in out.stdout


def test_fallback_modes():
    out = run_python(
        """
        import torch
        x = torch.ones(3, device="tpu")
        try:
            torch.binomial(x, x * 0.5)
            print("ran")
        except NotImplementedError as e:
            print("ERROR", e)
        """,
        TORCH_TPU_FALLBACK="error",
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "fallback"),
    )
    assert out.returncode == 0, out.stderr
    assert "ERROR aten::binomial" in out.stdout and "TORCH_TPU_FALLBACK=error" in out.stdout
    # binomial has no meta kernel in PyTorch, so it runs on the CPU.
    before = torch_tpu.metrics()["fallbacks"].get("aten::binomial", 0)
    x = torch.full((3,), 2.0, device="tpu")
    with pytest.warns(UserWarning, match="has no tpu lowering"):
        torch.binomial(x, x * 0.5)
    assert torch_tpu.metrics()["fallbacks"]["aten::binomial"] == before + 1


def test_metrics_report_lists_counters():
    torch_tpu.reset_metrics()
    (torch.ones(2, device="tpu") * 2).cpu()
    m = torch_tpu.metrics()
    assert m["executions"] >= 1 and m["device_to_host_transfers"] >= 1
    report = torch_tpu.metrics_report()
    assert "compiles" in report and "CPU fallbacks" in report


def test_program_cache_is_bounded():
    """Least recently used programs are dropped (and recompiled when needed again);
    results and the op named by a late failure survive their program's eviction."""
    out = run_python(
        """
        import torch, torch_tpu
        xs = [torch.arange(float(n), device="tpu") for n in range(1, 9)]
        torch_tpu.reset_metrics()
        for _ in range(2):
            ys = [x.mul(3) for x in xs]  # 8 shapes through a cache of 4
        for n, y in enumerate(ys, 1):
            assert torch.equal(y.cpu(), torch.arange(float(n)) * 3)
        m = torch_tpu.metrics()
        assert m["compiles"] == 16 and m["cache_hits"] == 0, m
        xs[0].mul(3); xs[0].mul(3)
        assert torch_tpu.metrics()["cache_hits"] == 1
        print("ok")
        """,
        TORCH_TPU_PROGRAM_CACHE_SIZE="4",
        TORCH_TPU_EAGER_MODE="strict",  # one program per op
        TORCH_TPU_CACHE_DIR="off",  # compiles, not loads from disk
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "bounded"),
    )
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


@cpu_platform_only
@pytest.mark.parametrize("value", ["0", "300"])
def test_num_devices_out_of_range_is_reported_on_first_use(value):
    out = run_python(
        """
        import torch
        print(torch.tpu.device_count())
        try:
            torch.ones(1, device="tpu")
        except RuntimeError as e:
            print(e)
        """,
        TORCH_TPU_NUM_DEVICES=value,
    )
    assert out.returncode == 0, out.stderr
    count, error = out.stdout.splitlines()
    assert count == "0"
    assert f"TORCH_TPU_NUM_DEVICES='{value}' is not an integer from 1 to 64" in error


@cpu_platform_only
def test_several_cpu_devices():
    out = run_python(
        """
        import torch
        assert torch.tpu.device_count() == 2
        a = torch.arange(4.0, device="tpu:1")
        assert a.device == torch.device("tpu:1")
        b = (a * 2).to("tpu:0")
        assert b.device == torch.device("tpu:0")
        with torch.tpu.device(1):
            c = torch.ones(4, device="tpu")
        assert c.device.index == 1
        print((a + c).cpu().tolist(), b.cpu().tolist())
        try:
            a + b
        except RuntimeError as e:
            print("ERROR", "same device" in str(e))
        """,
        TORCH_TPU_NUM_DEVICES="2",
        TORCH_TPU_LOCK_DIR=os.path.join(os.environ["TORCH_TPU_LOCK_DIR"], "two"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[1.0, 2.0, 3.0, 4.0] [0.0, 2.0, 4.0, 6.0]",
        "ERROR True",
    ]


# ---------------------------------------------------------------- runtime APIs


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_timing_events_measure_device_work(mode):
    def timed(work):
        start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
        start.record()
        results = work()  # kept: defer_and_fuse computes only what is still referenced
        end.record()
        end.synchronize()
        assert start.query() and end.query()
        del results
        return start.elapsed_time(end)

    x = torch.randn(512, 512, device="tpu")
    with torch_tpu.eager_mode(mode):
        # First compiled (an event also counts the host's time before the work it waits for).
        timed(lambda: x.add(1)), timed(lambda: [x @ x for _ in range(8)])
        small = timed(lambda: x.add(1))
        large = timed(lambda: [x @ x for _ in range(8)])
    assert 0 <= small < large, (small, large)
    a, b = torch.Event(device="tpu"), torch.Event(device="tpu")  # no timing
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)


def test_streams_are_the_device_queue():
    s = torch.Stream(device="tpu")
    assert s.device == torch.device("tpu:0")
    with torch.tpu.stream(torch.tpu.Stream()):
        y = torch.ones(4, device="tpu") * 2
    s.synchronize()
    assert y.cpu().tolist() == [2.0] * 4


def test_memory_apis_of_cuda():
    free, total = torch.accelerator.get_memory_info(0)
    assert 0 < free <= total
    assert torch.tpu.mem_get_info()[1] == total
    assert "Allocated memory" in torch.tpu.memory_summary()
    major, minor = torch.tpu.get_device_capability()
    assert isinstance(major, int) and isinstance(minor, int)
    assert torch.tpu.is_bf16_supported()


def test_out_of_memory_raises_at_allocation_with_the_sizes():
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 4096.00 GiB\. tpu:0"):
        torch.empty(1 << 40, device="tpu")
    torch.tpu.set_per_process_memory_fraction(0.0)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="within this process's memory fraction"):
            torch.empty(1024, device="tpu")
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    assert torch.empty(1024, device="tpu").numel() == 1024
    with pytest.raises(ValueError, match="Invalid fraction value: 2"):
        torch.tpu.set_per_process_memory_fraction(2)


def test_exit_spares_the_last_collection_only_after_device_use(tmp_path):
    out = run_python(
        """
        import gc, torch, torch_tpu
        torch_tpu._freeze_objects_at_exit()  # the atexit handler
        print(gc.get_freeze_count() > 0)
        torch.ones(1, device="tpu").cpu()
        torch_tpu._freeze_objects_at_exit()
        print(gc.get_freeze_count() > 0)
        """,
        TORCH_TPU_LOCK_DIR=str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_memory_history_and_snapshot_like_cuda(tmp_path):
    def allocate(n):
        return torch.ones(n, device="tpu")

    torch.tpu.memory._record_memory_history()
    try:
        a, b = allocate(1000), allocate(3000)
        del a
        snapshot = torch.tpu.memory._snapshot()
        torch.tpu.memory._dump_snapshot(str(tmp_path / "snapshot.pickle"))
    finally:
        torch.tpu.memory._record_memory_history(None)
    sizes = {s["address"]: s["total_size"] for s in snapshot["segments"]}
    assert 12000 in sizes.values() and 4000 not in sizes.values()
    (segment,) = (s for s in snapshot["segments"] if s["total_size"] == 12000)
    assert segment["blocks"][0]["frames"][0]["name"] == "allocate"
    trace = [(e["action"], e["size"]) for e in snapshot["device_traces"][0]]
    assert ("alloc", 4000) in trace and ("free_completed", 4000) in trace
    # PyTorch's own memory viewer reads it.
    from torch.cuda import _memory_viz

    assert "<html" in _memory_viz.trace_plot(snapshot).lower()
    assert torch.tpu.memory_snapshot() == []  # recording stopped: forgotten
    del b


def test_a_slice_of_a_tpu_storage_reads_and_writes_the_storage():
    x = torch.arange(4, dtype=torch.float64, device="tpu")
    storage = x.untyped_storage()
    expected = list(torch.arange(4, dtype=torch.float64).untyped_storage())
    assert list(storage)[8:16] == expected[8:16]
    piece = storage[8:16]  # points into `storage`'s data, as on CUDA
    assert piece.data_ptr() == storage.data_ptr() + 8
    assert piece.cpu().tolist() == expected[8:16] and piece[0] == expected[8]
    view = torch.empty(0, dtype=torch.float64, device="tpu").set_(piece)
    assert (view + 1).cpu().tolist() == [2.0]
    view.fill_(7)
    assert x.cpu().tolist() == [0.0, 7.0, 2.0, 3.0]
    misaligned = torch.empty(0, dtype=torch.float64, device="tpu").set_(storage[4:12])
    with pytest.raises(RuntimeError, match="not a multiple of its element size 8"):
        misaligned + 1


def test_data_pointers_are_distinct_device_addresses():
    a, b = torch.ones(100, device="tpu"), torch.ones(100, device="tpu")
    ranges = sorted((t.data_ptr(), t.data_ptr() + 400) for t in (a, b))
    assert ranges[0][1] <= ranges[1][0]  # no overlap, as on a real device
    assert a[10:].data_ptr() == a.data_ptr() + 40
    before = a.data_ptr()
    a.resize_(10_000)  # a storage that grows moves, as on CUDA
    assert a.data_ptr() != before and a[:3].cpu().tolist() == [1.0, 1.0, 1.0]


def test_dlpack_round_trip_aliases_the_tpu_tensor():
    from torch.utils.dlpack import from_dlpack, to_dlpack

    a = torch.arange(12.0, device="tpu").reshape(3, 4)
    b = torch.asarray(to_dlpack(a))
    assert b.device == a.device and b.data_ptr() == a.data_ptr()
    b.add_(1)
    row = from_dlpack(to_dlpack(a[1]))
    row.mul_(10)
    expected = torch.arange(12.0).reshape(3, 4) + 1
    expected[1] *= 10
    assert torch.equal(a.cpu(), expected) and torch.equal(row.cpu(), expected[1])
    as_double = torch.asarray(to_dlpack(a), dtype=torch.float64)
    assert torch.equal(as_double.cpu(), expected.double())


def test_legacy_storage_classes():
    a = torch.arange(5.0, device="tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        assert a.storage_type() is torch.tpu.FloatStorage
        assert isinstance(a.storage(), torch.tpu.FloatStorage)
        assert not isinstance(a.storage(), torch.FloatStorage)
        longs = torch.tpu.LongStorage([1, 2, 3])
        assert longs.device == a.device and longs.dtype == torch.int64
        assert longs.tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.ones((), device=d),
        lambda d: torch.zeros(1, dtype=torch.int64, device=d),
        lambda d: torch.full((), 7, dtype=torch.int32, device=d),
        lambda d: torch.full((1,), True, device=d),
        lambda d: torch.tensor([3.0], dtype=torch.float64, device=d).zero_(),
    ],
)
def test_one_element_fills_take_a_constant_not_a_program(make):
    """backward()'s seed and optimizers' step counters: a fill of a whole one-element
    storage with a value its dtype holds exactly launches nothing."""
    import torch_tpu

    with torch_tpu.eager_mode("strict"):
        make("tpu")  # the constant's upload, once
        before = torch_tpu.metrics()["executions"]
        t = make("tpu")
        assert torch_tpu.metrics()["executions"] == before
    expected = make("cpu")
    assert t.dtype == expected.dtype and torch.equal(t.cpu(), expected)


def test_other_fills_still_compute_on_the_device():
    x = torch.full((), 2.5, device="tpu")
    y = torch.ones(2, device="tpu")[1:].fill_(5)
    z = torch.full((1,), 1, dtype=torch.bfloat16, device="tpu")
    assert (x.item(), y.tolist(), z.item()) == (2.5, [5.0], 1.0)


def test_compiling_many_programs_stays_within_the_memory_map_limit():
    # XLA's CPU backend keeps each executable's code mapped, several mappings a kernel:
    # a process that compiled a few thousand programs (embedding_bag's, ~36 maps each)
    # reached vm.max_map_count and XLA aborted while compiling. Past half the limit, the
    # program cache drops its least recently used programs.
    code = """
        import os, torch, torch_tpu
        def maps():
            return sum(1 for _ in open(f"/proc/{os.getpid()}/maps"))
        x = torch.randn(8, 8, device="tpu")
        print("START", maps(), flush=True)
        for n in range(1, 201):  # a program per size
            y = torch.arange(n * 8.0, device="tpu").view(n, 8)
            got = (y @ x).tanh().cpu()
            assert torch.allclose(got, (y.cpu() @ x.cpu()).tanh(), atol=1e-5), n
        print("END", maps())
    """
    env = dict(TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(), TORCH_TPU_CACHE_DIR=tempfile.mkdtemp())
    start = run_python(code.replace("range(1, 201)", "range(1, 2)"), **env)
    assert start.returncode == 0, start.stderr
    baseline = int(start.stdout.split("START ")[1].split()[0])
    # Half the limit a few hundred maps above what the process starts with: 200
    # programs would add over a thousand.
    limit = 2 * (baseline + 400)
    out = run_python(code, TORCH_TPU_MEMORY_MAP_LIMIT=str(limit), **env)
    assert out.returncode == 0, out.stderr
    end = int(out.stdout.split("END ")[1].split()[0])
    assert end < limit // 2 + 600, (baseline, end, limit)
