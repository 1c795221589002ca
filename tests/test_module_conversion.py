"""module.to("tpu") behaves as on CUDA: ties kept, buffers updated in place, dtype and
memory-format conversions, parametrizations; pinned host memory."""

import pytest
import torch
import torch.nn.functional as F


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 6)
        self.head = torch.nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_tied_parameters_stay_tied_and_train_together():
    torch.manual_seed(0)
    cpu = TiedLM()
    tpu = TiedLM()
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    assert tpu.head.weight is tpu.embed.weight
    assert len(list(tpu.parameters())) == 1
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(
                model(ids.to(device)).flatten(0, 1), ids.flatten().to(device)
            ).backward()
            opt.step()
    torch.testing.assert_close(tpu.embed.weight.cpu(), cpu.embed.weight)
    tpu.cpu()
    assert tpu.head.weight is tpu.embed.weight and tpu.head.weight.device.type == "cpu"


def test_shared_submodule_and_grads_move():
    torch.manual_seed(0)
    shared = torch.nn.Linear(3, 3)
    model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared)
    model(torch.randn(2, 3)).sum().backward()
    model.to("tpu")
    assert model[0] is model[2] and model[0].weight.grad.device.type == "tpu"


def test_parameters_move_in_place():
    """As between the CPU and CUDA, `.data =` swaps a tpu tensor into a CPU one, so
    module.to() keeps each Parameter object (an optimizer made before the move still
    holds the module's parameters) and lazy modules' uninitialized parameters."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    weight = model.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to("tpu")
    assert model.weight is weight and weight.device.type == "tpu"
    model(torch.randn(4, 3, device="tpu")).sum().backward()
    opt.step()
    assert weight.device.type == "tpu"

    lazy = torch.nn.LazyConv1d(4, 2).to("tpu")
    assert isinstance(lazy.weight, torch.nn.UninitializedParameter)
    x = torch.randn(2, 3, 5)
    y = lazy(x.to("tpu"))
    assert lazy.weight.shape == (4, 3, 2) and lazy.weight.device.type == "tpu"
    expected = torch.nn.functional.conv1d(x, lazy.weight.cpu(), lazy.bias.cpu())
    torch.testing.assert_close(y.cpu(), expected)


def test_batchnorm_running_stats_update_in_place():
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3)
    tpu = torch.nn.BatchNorm2d(3).to("tpu")
    mean = tpu.running_mean
    x = torch.randn(4, 3, 5, 5)
    for _ in range(3):
        cpu(x)
        tpu(x.to("tpu"))
    assert tpu.running_mean is mean
    torch.testing.assert_close(tpu.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(tpu.running_var.cpu(), cpu.running_var)
    assert tpu.num_batches_tracked.item() == 3


def test_dtype_and_channels_last_conversions():
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(3, 4, 3)
    tpu = torch.nn.Conv2d(3, 4, 3)
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu", memory_format=torch.channels_last)
    assert tpu.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x))
    tpu.double()
    torch.testing.assert_close(tpu(x.double().to("tpu")).cpu(), cpu.double()(x.double()))
    tpu.to(torch.bfloat16)
    assert tpu.weight.dtype == torch.bfloat16 and tpu.weight.device.type == "tpu"


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm", "orthogonal"])
def test_parametrizations(kind):
    torch.manual_seed(0)
    make = {
        "weight_norm": torch.nn.utils.parametrizations.weight_norm,
        "spectral_norm": torch.nn.utils.parametrizations.spectral_norm,
        "orthogonal": torch.nn.utils.parametrizations.orthogonal,
    }[kind]
    cpu = make(torch.nn.Linear(4, 4))
    tpu = make(torch.nn.Linear(4, 4))
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    x = torch.randn(3, 4)
    cpu.eval(), tpu.eval()  # spectral_norm's power iteration draws nothing in eval
    torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x), atol=1e-5, rtol=1e-5)
    tpu(x.to("tpu")).sum().backward()
    cpu(x).sum().backward()
    for (name, a), (_, b) in zip(tpu.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_old_weight_norm():
    torch.manual_seed(0)
    cpu = torch.nn.utils.weight_norm(torch.nn.Linear(4, 4))
    tpu = torch.nn.utils.weight_norm(torch.nn.Linear(4, 4))
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    x = torch.randn(3, 4)
    torch.testing.assert_close(tpu(x.to("tpu")).cpu(), cpu(x))


def test_pin_memory_and_non_blocking_copies():
    x = torch.randn(64)
    assert not x.is_pinned()
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    assert pinned[8:].is_pinned()  # views of pinned storage are pinned
    y = pinned.to("tpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(y.cpu(), x)
    back = y.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, x)
    del pinned  # freeing pinned memory forgets it
    assert not torch.randn(64).is_pinned()


def test_empty_host_cache_with_tpu_tensors_and_pinned_memory():
    # The tpu device had no at::HostAllocator: empty_host_cache() dereferenced a null
    # allocator (SIGSEGV) once a tpu tensor existed.
    x = torch.ones(4, device="tpu")
    pinned = torch.arange(16.0).pin_memory()
    torch.accelerator.empty_host_cache()
    assert pinned.is_pinned()
    assert torch.equal(pinned.to("tpu", non_blocking=True).cpu(), torch.arange(16.0))
    del pinned
    torch.accelerator.empty_host_cache()
    assert torch.randn(8).pin_memory().is_pinned()
    assert x.sum().item() == 4


@pytest.mark.filterwarnings("ignore:pin_memory_device is deprecated:UserWarning")
@pytest.mark.parametrize("device", [None, "tpu"])
def test_dataloader_pins_batches(device):
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    kwargs = {"pin_memory_device": device} if device else {}
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True, **kwargs)
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        assert x.to("tpu", non_blocking=True).device.type == "tpu"
