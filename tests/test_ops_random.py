"""Random sampling on tpu: distributions, reproducibility from the device generator,
dropout forward and backward."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu


def draws(fn, seed=0):
    torch.tpu.manual_seed(seed)
    return fn().cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_uniform_range_and_moments(dtype, no_fallback):
    x = draws(lambda: torch.empty(20000, device="tpu", dtype=dtype).uniform_(-2, 3)).double()
    assert x.min() >= -2 and x.max() <= 3
    assert abs(x.mean() - 0.5) < 0.05
    assert abs(x.var() - 25 / 12) < 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normal_moments(dtype, no_fallback):
    x = draws(lambda: torch.empty(40000, device="tpu", dtype=dtype).normal_(1.5, 2.0)).double()
    assert abs(x.mean() - 1.5) < 0.05
    assert abs(x.std() - 2.0) < 0.05
    # roughly normal tails: about 4.6% beyond two standard deviations
    tail = ((x - 1.5).abs() > 4.0).double().mean()
    assert 0.035 < tail < 0.057


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
def test_random_integers(dtype, no_fallback):
    x = draws(lambda: torch.randint(3, 9, (5000,), device="tpu", dtype=dtype))
    assert x.dtype == dtype
    assert set(x.long().unique().tolist()) == set(range(3, 9))
    y = draws(lambda: torch.empty(5000, device="tpu", dtype=dtype).random_(5))
    assert set(y.long().unique().tolist()) == set(range(5))


def test_bernoulli(no_fallback):
    p = torch.tensor([0.0, 0.25, 0.5, 1.0]).repeat(5000, 1)
    x = draws(lambda: torch.bernoulli(p.to("tpu")))
    freq = x.mean(0)
    assert freq[0] == 0 and freq[3] == 1
    assert abs(freq[1] - 0.25) < 0.03 and abs(freq[2] - 0.5) < 0.03
    y = draws(lambda: torch.empty(10000, device="tpu").bernoulli_(0.3))
    assert abs(y.mean() - 0.3) < 0.03


def test_same_seed_same_numbers_different_seed_different_numbers():
    a = draws(lambda: torch.randn(100, device="tpu"), seed=5)
    b = draws(lambda: torch.randn(100, device="tpu"), seed=5)
    c = draws(lambda: torch.randn(100, device="tpu"), seed=6)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_consecutive_draws_differ_and_do_not_recompile():
    torch.tpu.manual_seed(0)
    first = torch.rand(64, device="tpu").cpu()
    before = torch_tpu.metrics()["compiles"]
    later = [torch.rand(64, device="tpu").cpu() for _ in range(3)]
    assert torch_tpu.metrics()["compiles"] == before
    assert all(not torch.equal(first, x) for x in later)
    assert not torch.equal(later[0], later[1])


def test_generator_state_round_trip_and_explicit_generator():
    torch.tpu.manual_seed(3)
    state = torch.tpu.get_rng_state()
    a = torch.randn(10, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="tpu").cpu(), a)
    g = torch.Generator(device="tpu").manual_seed(3)
    # an explicit generator with the same seed draws the same stream
    assert torch.equal(torch.randn(10, device="tpu", generator=g).cpu(), a)


def test_dropout_forward_and_backward(no_fallback):
    x = torch.randn(64, 128)
    xt = x.to("tpu").requires_grad_()
    torch.tpu.manual_seed(0)
    y = F.dropout(xt, p=0.25, training=True)
    kept = y.detach().cpu() != 0
    assert abs(kept.float().mean() - 0.75) < 0.03
    torch.testing.assert_close(y.detach().cpu()[kept], x[kept] / 0.75)
    y.sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), kept.float() / 0.75)
    assert torch.equal(F.dropout(xt, p=0.25, training=False).detach().cpu(), x)


def test_dropout_module_reproducible_under_manual_seed():
    model = torch.nn.Dropout(0.5).to("tpu")
    x = torch.ones(1000, device="tpu")
    torch.manual_seed(11)
    a = model(x).cpu()
    torch.manual_seed(11)
    assert torch.equal(model(x).cpu(), a)
