"""Checkpoints: torch.save/torch.load of tpu tensors, views, modules, optimizers and schedulers
(every map_location form, weights_only), checkpoints written for another device (cuda:0),
safetensors, and a training run resumed from a checkpoint bit for bit."""

import io
import os
import subprocess
import sys
import zipfile
from unittest import mock

import pytest
import safetensors
import safetensors.torch as st
import torch
import torch.nn.functional as F

import torch_tpu.serialization  # noqa: F401  (the safetensors adapter; torch_tpu imports it too)

TPU = torch.device("tpu", 0)


def tensors_cpu():
    g = torch.Generator().manual_seed(0)
    return {
        "f32": torch.randn(3, 4, generator=g),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "i64": torch.randint(-100, 100, (2, 3), generator=g),
        "bool": torch.rand(6, generator=g) > 0.5,
        "scalar": torch.tensor(2.5),
    }


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def assert_on(tensors, device, expected):
    for key, t in tensors.items():
        assert t.device == device, key
        assert t.dtype == expected[key].dtype, key
        assert torch.equal(t.cpu(), expected[key]), key


# Every way of saying "onto the tpu" (None: where the file says, which is tpu:0).
TPU_LOCATIONS = {
    "none": None,
    "str": "tpu",
    "str_index": "tpu:0",
    "device": torch.device("tpu"),
    "device_index": torch.device("tpu", 0),
    "dict": {"tpu:0": "tpu"},
    "callable": lambda storage, location: storage.tpu(),
    "callable_none": lambda storage, location: None,
}


# ---------------------------------------------------------------- tensors and views


@pytest.mark.parametrize("weights_only", [False, True])
@pytest.mark.parametrize("where", sorted(TPU_LOCATIONS))
def test_tensors_round_trip_onto_tpu(where, weights_only):
    expected = tensors_cpu()
    buf = saved({k: v.to("tpu") for k, v in expected.items()})
    loaded = torch.load(buf, map_location=TPU_LOCATIONS[where], weights_only=weights_only)
    assert_on(loaded, TPU, expected)


@pytest.mark.parametrize("where", ["cpu", {"tpu:0": "cpu"}, torch.device("cpu")])
def test_tensors_load_onto_cpu(where):
    expected = tensors_cpu()
    buf = saved({k: v.to("tpu") for k, v in expected.items()})
    loaded = torch.load(buf, map_location=where, weights_only=True)
    assert_on(loaded, torch.device("cpu"), expected)


@pytest.mark.parametrize("where", [None, "tpu", "cpu"])
def test_mmap_load(tmp_path, where):
    base = torch.arange(10.0)
    path = tmp_path / "t.pt"
    on_tpu = base.to("tpu")
    torch.save({"base": on_tpu, "tail": on_tpu[4:]}, path)
    loaded = torch.load(path, mmap=True, map_location=where, weights_only=True)
    device = torch.device("cpu") if where == "cpu" else TPU
    assert_on(loaded, device, {"base": base, "tail": base[4:]})
    assert (
        loaded["tail"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    )


def test_file_records_tpu_location(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.ones(2, device="tpu"), path)
    with zipfile.ZipFile(path) as z:
        pickle = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"tpu:0" in pickle


def views(base):
    return {
        "base": base,
        "row": base[1],
        "t": base.t(),
        "cols": base[:, 1:3],
        "flat": base.view(-1)[5:],
        "diag": base.diagonal(),
    }


@pytest.mark.parametrize("weights_only", [False, True])
@pytest.mark.parametrize("where", [None, "tpu", {"tpu:0": "tpu:0"}])
def test_views_share_storage_after_load(where, weights_only):
    base_cpu = torch.arange(16.0).reshape(4, 4)
    buf = saved(views(base_cpu.to("tpu")))
    with zipfile.ZipFile(buf) as z:
        assert sum("/data/" in n for n in z.namelist()) == 1, "the storage was saved once"
    buf.seek(0)
    loaded = torch.load(buf, map_location=where, weights_only=weights_only)
    expected = views(base_cpu)
    ptr = loaded["base"].untyped_storage().data_ptr()
    for key, t in loaded.items():
        assert t.device == TPU, key
        assert t.untyped_storage().data_ptr() == ptr, key
        assert t.size() == expected[key].size(), key
        assert t.stride() == expected[key].stride(), key
        assert t.storage_offset() == expected[key].storage_offset(), key
        assert torch.equal(t.cpu(), expected[key]), key
    # Aliasing holds after the load: a write through one view is seen by all the others.
    loaded["row"].mul_(-1)
    loaded["t"][3].fill_(100.0)
    expected["row"].mul_(-1)
    expected["t"][3].fill_(100.0)
    for key, t in loaded.items():
        assert torch.equal(t.cpu(), expected[key]), key


# ---------------------------------------------------------------- a checkpoint written for cuda


def save_as_if_on(location, obj, path):
    """Saves CPU tensors with every storage tagged ``location`` in the file, as torch.save
    does for tensors that live there (what a checkpoint written on a CUDA machine holds)."""
    with mock.patch("torch.serialization.location_tag", lambda storage: location):
        torch.save(obj, path)
    with zipfile.ZipFile(path) as z:
        pickle = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert location.encode() in pickle and b"cpu" not in pickle


@pytest.fixture
def cuda_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    base = torch.arange(12.0).reshape(3, 4)
    obj = {"model": model.state_dict(), "base": base, "view": base[1:, 2:]}
    path = tmp_path / "cuda.pt"
    save_as_if_on("cuda:0", obj, path)
    return path, obj


def test_cuda_checkpoint_without_map_location_fails_like_cpu_only_torch(cuda_checkpoint):
    path, _ = cuda_checkpoint
    with pytest.raises(RuntimeError, match=r"torch\.cuda\.is_available\(\) is False"):
        torch.load(path, weights_only=True)


@pytest.mark.parametrize("weights_only", [False, True])
@pytest.mark.parametrize(
    "where",
    [
        "tpu",
        "tpu:0",
        torch.device("tpu"),
        {"cuda:0": "tpu:0"},
        {"cuda:0": "tpu"},
        lambda storage, location: storage.tpu() if location == "cuda:0" else None,
    ],
    ids=["str", "str_index", "device", "dict_index", "dict", "callable"],
)
def test_cuda_checkpoint_loads_onto_tpu(cuda_checkpoint, where, weights_only):
    path, obj = cuda_checkpoint
    loaded = torch.load(path, map_location=where, weights_only=weights_only)
    assert_on(loaded["model"], TPU, obj["model"])
    assert loaded["base"].device == TPU and loaded["view"].device == TPU
    assert torch.equal(loaded["view"].cpu(), obj["view"])
    assert (
        loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    )

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    model.to("tpu").load_state_dict(loaded["model"])
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    ref.load_state_dict(obj["model"])
    x = torch.randn(5, 4)
    torch.testing.assert_close(model(x.to("tpu")).cpu(), ref(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- modules, optimizers, schedulers


def small_model():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Dropout(p=0.1), torch.nn.Linear(16, 4)
    )


@pytest.mark.parametrize("weights_only", [False, True])
def test_module_state_dict(tmp_path, weights_only):
    torch.manual_seed(0)
    model = small_model().to("tpu").eval()
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)

    state = torch.load(path, weights_only=weights_only)
    assert all(t.device == TPU for t in state.values())
    fresh = small_model().to("tpu").eval()
    fresh.load_state_dict(state)
    for (name, a), b in zip(fresh.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name

    cpu_model = small_model().eval()
    cpu_model.load_state_dict(torch.load(path, map_location="cpu", weights_only=weights_only))
    x = torch.randn(3, 8)
    torch.testing.assert_close(fresh(x.to("tpu")).cpu(), cpu_model(x), rtol=1e-5, atol=1e-6)


def test_whole_module_and_parameter(tmp_path):
    torch.manual_seed(0)
    model = small_model().to("tpu").eval()
    path = tmp_path / "module.pt"
    torch.save({"module": model, "param": model[0].weight}, path)
    loaded = torch.load(path, weights_only=False)
    assert isinstance(loaded["param"], torch.nn.Parameter) and loaded["param"].device == TPU
    # The parameter saved beside its module is that module's parameter after the load.
    assert loaded["param"] is loaded["module"][0].weight
    x = torch.randn(3, 8).to("tpu")
    assert torch.equal(loaded["module"](x).cpu(), model(x).cpu())


def train_steps(model, opt, sched, steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(4, 8).to("tpu")).square().mean()
        loss.backward()
        opt.step()
        sched.step()


@pytest.mark.parametrize("weights_only", [False, True])
@pytest.mark.parametrize("where", [None, "tpu", "tpu:0", {"tpu:0": "tpu"}])
def test_adam_and_scheduler_state(tmp_path, where, weights_only):
    torch.manual_seed(0)
    model = small_model().to("tpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    train_steps(model, opt, sched, 2)
    path = tmp_path / "ckpt.pt"
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, path)

    ckpt = torch.load(path, map_location=where, weights_only=weights_only)
    saved_state = opt.state_dict()
    assert ckpt["sched"] == sched.state_dict()
    assert ckpt["opt"]["param_groups"] == saved_state["param_groups"]
    for i, state in saved_state["state"].items():
        loaded = ckpt["opt"]["state"][i]
        assert loaded.keys() == state.keys()
        for key, t in state.items():
            # As with CUDA: a device map_location moves even the CPU "step" counters.
            assert loaded[key].device == (TPU if isinstance(where, str) else t.device), (i, key)
            assert torch.equal(loaded[key].cpu(), t.cpu()), (i, key)
        assert loaded["exp_avg"].device == TPU

    fresh = small_model().to("tpu")
    fresh.load_state_dict(model.state_dict())
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1.0)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=1, gamma=0.5)
    fresh_opt.load_state_dict(ckpt["opt"])
    fresh_sched.load_state_dict(ckpt["sched"])
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    assert fresh_opt.state[fresh[0].weight]["exp_avg_sq"].device == TPU


# ---------------------------------------------------------------- safetensors


@pytest.mark.parametrize("device", ["tpu", "tpu:0", torch.device("tpu"), TPU, 0])
def test_safetensors_file_onto_tpu(tmp_path, device):
    expected = {k: v for k, v in tensors_cpu().items()}
    path = tmp_path / "t.safetensors"
    st.save_file({k: v.to("tpu") for k, v in expected.items()}, path)
    assert_on(st.load_file(path, device=device), TPU, expected)
    assert_on(st.load_file(path, device=device, backend="pread"), TPU, expected)
    assert_on(st.load_file(path), torch.device("cpu"), expected)
    assert st.load(st.save({"f32": expected["f32"].to("tpu")}))["f32"].equal(expected["f32"])


def test_safetensors_safe_open_onto_tpu(tmp_path):
    expected = tensors_cpu()
    path = tmp_path / "t.safetensors"
    st.save_file({k: v.to("tpu") for k, v in expected.items()}, path)
    with safetensors.safe_open(path, framework="pt", device="tpu") as f:
        assert sorted(f.keys()) == sorted(expected)
        t = f.get_tensor("f32")
        part = f.get_slice("f32")[1:, :3]
    assert t.device == TPU and torch.equal(t.cpu(), expected["f32"])
    assert part.device == TPU and torch.equal(part.cpu(), expected["f32"][1:, :3])


def test_safetensors_other_devices_unchanged(tmp_path):
    path = tmp_path / "t.safetensors"
    st.save_file({"x": torch.ones(2)}, path)
    with pytest.raises(safetensors.SafetensorError, match="device foo is invalid"):
        st.load_file(path, device="foo")
    with pytest.raises(RuntimeError):
        st.load_file(path, device="tpu:7")  # no such device


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.mlp = small_model()
        self.head = torch.nn.Linear(8, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(h) + self.mlp(h).sum(-1, keepdim=True)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_safetensors_save_and_load_model(tmp_path, device):
    torch.manual_seed(0)
    model = Tied().to("tpu").eval()
    path = tmp_path / "m.safetensors"
    st.save_model(model, path)
    # Tied weights are stored once, as for CUDA modules.
    assert len(st.load_file(path)) == len(model.state_dict()) - 1

    fresh = Tied().to("tpu").eval()
    missing, unexpected = st.load_model(fresh, path, device=device)
    assert missing == set() and unexpected == []
    assert fresh.head.weight is fresh.emb.weight and fresh.emb.weight.device == TPU
    for (name, a), b in zip(fresh.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name

    cpu_model = Tied().eval()
    st.load_model(cpu_model, path)
    idx = torch.tensor([[1, 2, 3], [9, 0, 4]])
    torch.testing.assert_close(fresh(idx.to("tpu")).cpu(), cpu_model(idx), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "imports",
    [
        "import torch_tpu; import torch_tpu.serialization; import safetensors.torch",
        "import safetensors; import torch_tpu; import torch_tpu.serialization; "
        "import safetensors.torch",
        "import safetensors.torch; import torch_tpu; import torch_tpu.serialization",
    ],
    ids=["torch_tpu_first", "safetensors_first", "safetensors_torch_first"],
)
def test_safetensors_patched_in_any_import_order(tmp_path, imports):
    path = tmp_path / "t.safetensors"
    st.save_file({"x": torch.arange(3.0)}, path)
    code = (
        f"{imports}\n"
        "import sys, torch\n"
        f"t = safetensors.torch.load_file({str(path)!r}, device='tpu')['x']\n"
        "assert t.device == torch.device('tpu', 0), t.device\n"
        "assert t.cpu().tolist() == [0.0, 1.0, 2.0]\n"
        "with safetensors.safe_open(sys.argv[1], 'pt', device='tpu:0') as f:\n"
        "    assert f.get_tensor('x').device.type == 'tpu'\n"
    )
    # Its own lock directory: this process holds the device in the usual one.
    env = dict(os.environ, TORCH_TPU_LOCK_DIR=str(tmp_path / "locks"))
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, env=env)


# ---------------------------------------------------------------- bit-identical resume

TOTAL, RESUME_AT = 6, 3

SCHEDULERS = {
    "lambda": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)),
    "onecycle": lambda opt: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=1e-2, total_steps=TOTAL
    ),
}


def make_run(scheduler):
    model = small_model().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, opt, SCHEDULERS[scheduler](opt)


def run_steps(model, opt, sched, gen, steps):
    """Training steps whose every random draw is from a saved state: the batch from the
    global CPU generator, dropout from the tpu default generator, input noise from ``gen``."""
    losses = []
    model.train()
    for _ in range(steps):
        x, y = torch.randn(8, 8).to("tpu"), torch.randint(0, 4, (8,)).to("tpu")
        x = x + 0.01 * torch.randn(8, 8, device="tpu", generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach().cpu())
    return losses


def checkpoint(model, opt, sched, gen):
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "cpu_rng": torch.get_rng_state(),
        "tpu_rng": torch.tpu.get_rng_state(),
        "tpu_rng_all": torch.tpu.get_rng_state_all(),
        "generator": gen.get_state(),
    }


def restore(ckpt, model, opt, sched, gen):
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    torch.set_rng_state(ckpt["cpu_rng"])
    torch.tpu.set_rng_state_all(ckpt["tpu_rng_all"])
    torch.tpu.set_rng_state(ckpt["tpu_rng"])
    gen.set_state(ckpt["generator"])


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_resume_is_bit_identical(tmp_path, scheduler):
    torch.manual_seed(0)
    torch.tpu.manual_seed(0)
    gen = torch.Generator(device="tpu").manual_seed(7)
    model, opt, sched = make_run(scheduler)
    losses = run_steps(model, opt, sched, gen, RESUME_AT)
    path = tmp_path / "resume.pt"
    torch.save(checkpoint(model, opt, sched, gen), path)
    losses += run_steps(model, opt, sched, gen, TOTAL - RESUME_AT)

    # A fresh process-like start: other seeds, other initial weights, a new generator.
    torch.manual_seed(1234)
    torch.tpu.manual_seed(4321)
    gen2 = torch.Generator(device="tpu").manual_seed(99)
    model2, opt2, sched2 = make_run(scheduler)
    restore(torch.load(path, weights_only=True), model2, opt2, sched2, gen2)
    assert sched2.get_last_lr() == pytest.approx(
        [g["lr"] for g in torch.load(path, weights_only=True)["optimizer"]["param_groups"]]
    )
    resumed = run_steps(model2, opt2, sched2, gen2, TOTAL - RESUME_AT)

    for step, (a, b) in enumerate(zip(resumed, losses[RESUME_AT:]), RESUME_AT + 1):
        assert torch.equal(a, b), f"step {step}: resumed loss {a} vs {b}"
    for (name, a), b in zip(model2.named_parameters(), model.parameters()):
        assert torch.equal(a.cpu(), b.cpu()), name
    assert sched2.state_dict() == sched.state_dict()

    # The check has teeth: without the tpu RNG state (dropout) the run diverges.
    model3, opt3, sched3 = make_run(scheduler)
    ckpt = torch.load(path, weights_only=True)
    torch.tpu.manual_seed(4321)
    model3.load_state_dict(ckpt["model"])
    opt3.load_state_dict(ckpt["optimizer"])
    sched3.load_state_dict(ckpt["scheduler"])
    torch.set_rng_state(ckpt["cpu_rng"])
    gen.set_state(ckpt["generator"])
    diverged = run_steps(model3, opt3, sched3, gen, TOTAL - RESUME_AT)
    assert not all(torch.equal(a, b) for a, b in zip(diverged, losses[RESUME_AT:]))
