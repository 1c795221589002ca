"""torch.autocast("tpu") follows the CUDA backend's op lists; GradScaler("tpu") runs natively."""

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_amp_dtypes_and_default():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    with torch.autocast("tpu"):
        assert torch.is_autocast_enabled("tpu")
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("tpu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lower_precision_ops_match_explicit_casts(dtype):
    x, w, b = _randn(4, 8), _randn(16, 8, seed=1), _randn(16, seed=2)
    with torch.autocast("tpu", dtype=dtype):
        got = F.linear(x.to("tpu"), w.to("tpu"), b.to("tpu"))
        mm = x.to("tpu") @ w.to("tpu").t()
    assert got.dtype == dtype and mm.dtype == dtype
    want = F.linear(x.to(dtype), w.to(dtype), b.to(dtype))
    torch.testing.assert_close(got.cpu(), want, atol=2e-2, rtol=2e-2)


def test_conv_runs_in_lower_precision():
    x, w = _randn(2, 3, 8, 8), _randn(4, 3, 3, 3, seed=1)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = F.conv2d(x.to("tpu"), w.to("tpu"))
    assert y.dtype == torch.bfloat16
    want = F.conv2d(x.bfloat16(), w.bfloat16())
    torch.testing.assert_close(y.cpu(), want, atol=5e-2, rtol=2e-2)


def test_fp32_and_set_opt_dtype_policies():
    h = _randn(4, 8).to(torch.bfloat16).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.softmax(h, -1).dtype == torch.float32  # fp32_set_opt_dtype
        assert torch.exp(h).dtype == torch.float32  # fp32
        assert F.layer_norm(h, (8,)).dtype == torch.float32
        assert h.sum().dtype == torch.float32
        assert F.mse_loss(h, h).dtype == torch.float32
        assert torch.relu(h).dtype == torch.bfloat16  # not listed: runs as given
        got = torch.softmax(h, -1)
    torch.testing.assert_close(got.cpu(), torch.softmax(h.cpu().float(), -1))


def test_promote_policy():
    a = _randn(4).to("tpu").bfloat16()
    b = _randn(4, seed=1).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.addcmul(a, a, b).dtype == torch.float32
        assert torch.atan2(a, b).dtype == torch.float32


def test_binary_cross_entropy_is_banned_like_cuda():
    p = torch.rand(4).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)
        F.binary_cross_entropy_with_logits(p, p)


def test_disabled_autocast_and_other_devices_untouched():
    x = _randn(4, 4).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16, enabled=False):
        assert (x @ x).dtype == torch.float32
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert (x.cpu() @ x.cpu()).dtype == torch.float32


def test_autocast_training_step_backward_dtypes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.to("tpu")
    x, y = _randn(6, 8).to("tpu"), torch.randint(0, 4, (6,)).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out, y)
    assert out.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    assert all(torch.isfinite(p.grad.cpu()).all() for p in model.parameters())


def _scaler_run(device, grads):
    p = torch.nn.Parameter(torch.ones(3, device=device))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**4, growth_interval=2)
    scales = []
    for g in grads:
        opt.zero_grad()
        scaler.scale((p * g.to(device)).sum()).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return p.detach().cpu(), scales


def test_grad_scaler_matches_cpu_including_skipped_steps():
    grads = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([float("inf"), 1.0, 1.0])]
    grads += [torch.tensor([0.5, 0.5, 0.5])] * 3 + [torch.tensor([float("nan"), 0.0, 0.0])]
    got_p, got_scales = _scaler_run("tpu", grads)
    want_p, want_scales = _scaler_run("cpu", grads)
    assert got_scales == want_scales
    assert got_scales[1] == 8.0  # the inf step halved the scale and was skipped
    torch.testing.assert_close(got_p, want_p)


def test_grad_scaler_float16_autocast_training():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("tpu")
    x, y = _randn(16, 8).to("tpu"), _randn(16, 4, seed=3).to("tpu")
    losses = []
    for _ in range(8):
        opt.zero_grad()
        with torch.autocast("tpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
