"""scaled_dot_product_attention on tpu against the CPU: masks, causal, scale,
grouped-query attention, dropout statistics, gradients (also of the mask)."""

import pytest
import torch
import torch.nn.functional as F

from op_utils import check


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    yield


def _qkv(batch=2, heads=4, kv_heads=4, q_len=6, kv_len=9, dim=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(is_causal=True), dict(scale=0.2), dict(is_causal=True, scale=1.5)],
)
def test_sdpa(kwargs):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs), *_qkv())


def test_sdpa_masks():
    q, k, v = _qkv()
    bool_mask = torch.randn(6, 9) > 0
    float_mask = torch.randn(2, 1, 6, 9)
    check(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, bool_mask
    )
    check(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, float_mask
    )


def test_sdpa_fully_masked_row():
    q, k, v = _qkv()
    mask = torch.ones(6, 9, dtype=torch.bool)
    mask[2] = False
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask)


def test_sdpa_grouped_query():
    q, k, v = _qkv(heads=8, kv_heads=2)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v)


def test_sdpa_gradients_including_mask():
    q, k, v = _qkv()
    mask = torch.randn(2, 4, 6, 9)

    def grads(device):
        leaves = [t.to(device).requires_grad_() for t in (q, k, v, mask)]
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3], is_causal=False)
        out.backward(torch.ones_like(out))
        return [t.grad.cpu() for t in leaves]

    for a, e in zip(grads("tpu"), grads("cpu")):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_sdpa_bfloat16():
    q, k, v = _qkv(dtype=torch.bfloat16)
    out = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(out.cpu().float(), expected, rtol=2e-2, atol=2e-2)


def test_sdpa_dropout():
    q, k, v = (t.to("tpu") for t in _qkv(q_len=64, kv_len=64))
    torch.manual_seed(0)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(a.cpu(), b.cpu())  # reproducible under the seed
    c = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.equal(a.cpu(), c.cpu())
    # Inverted dropout keeps the expectation: average over many draws.
    ones = torch.ones(1, 1, 64, 64, device="tpu")
    vals = torch.eye(64, device="tpu").reshape(1, 1, 64, 64)
    mean = torch.stack(
        [F.scaled_dot_product_attention(ones, ones, vals, dropout_p=0.5) for _ in range(8)]
    ).mean()
    assert abs(mean.item() - 1 / 64) < 0.1 / 64
