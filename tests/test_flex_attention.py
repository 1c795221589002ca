"""FlexAttention on tpu: forward against PyTorch's CPU flex_attention, gradients against
autograd of the same attention written densely on the CPU (PyTorch's CPU flex_attention
has no backward), eagerly and compiled; a compiled step runs as captured programs,
never op by op."""

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import torch_tpu

B, H, S, D = 2, 4, 32, 8


@pytest.fixture(autouse=True)
def _no_fallback(no_fallback):
    with warnings.catch_warnings():
        # PyTorch's advice for CUDA (compile flex_attention for a fused kernel).
        warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
        yield


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _sliding(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 8)


def _relative(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.1


def _softcap(score, b, h, q_idx, kv_idx):
    return 5.0 * torch.tanh(score / 5.0)


def _inputs(heads=H, kv_heads=H, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, heads, S, D, generator=g)
    k = torch.randn(B, kv_heads, S, D, generator=g)
    v = torch.randn(B, kv_heads, S, D, generator=g)
    return q, k, v


def _dense(q, k, v, score_mod=None, mask_mod=None, scale=None):
    """The attention flex_attention computes, as plain tensor ops."""
    groups = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = q @ k.transpose(-2, -1) * (q.size(-1) ** -0.5 if scale is None else scale)
    idx = [
        torch.arange(n).view([-1 if d == i else 1 for d in range(4)]) for i, n in enumerate(s.shape)
    ]
    if score_mod is not None:
        s = score_mod(s, *idx)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(*idx), float("-inf"))
    return s.softmax(-1) @ v


def _to_tpu(*tensors):
    return [t.detach().to("tpu").requires_grad_() for t in tensors]


def _block_mask(mask_mod, device):
    return None if mask_mod is None else create_block_mask(mask_mod, B, H, S, S, device=device)


CASES = {
    "plain": (None, None),
    "score_mod": (_relative, None),
    "causal": (None, _causal),
    "softcap_sliding": (_softcap, _sliding),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_matches_cpu_flex_attention(case):
    score_mod, mask_mod = CASES[case]
    q, k, v = _inputs()
    expected = flex_attention(q, k, v, score_mod=score_mod, block_mask=_block_mask(mask_mod, "cpu"))
    with torch.no_grad():
        got = flex_attention(
            *[t.to("tpu") for t in (q, k, v)],
            score_mod=score_mod,
            block_mask=_block_mask(mask_mod, "tpu"),
        )
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_dense_attention(case):
    score_mod, mask_mod = CASES[case]
    q, k, v = [t.double().requires_grad_() for t in _inputs()]
    expected = _dense(q, k, v, score_mod, mask_mod)
    expected.backward(torch.ones_like(expected))
    qt, kt, vt = _to_tpu(q.float(), k.float(), v.float())
    got = flex_attention(qt, kt, vt, score_mod=score_mod, block_mask=_block_mask(mask_mod, "tpu"))
    got.backward(torch.ones_like(got))
    torch.testing.assert_close(got.cpu().double(), expected, atol=1e-5, rtol=1e-5)
    for t, ref in ((qt, q), (kt, k), (vt, v)):
        torch.testing.assert_close(t.grad.cpu().double(), ref.grad, atol=1e-4, rtol=1e-4)


def test_grouped_query_and_logsumexp():
    q, k, v = [t.double().requires_grad_() for t in _inputs(kv_heads=2)]
    expected = _dense(q, k, v, mask_mod=_causal, scale=0.3)
    expected.sum().backward()
    qt, kt, vt = _to_tpu(q.float(), k.float(), v.float())
    lse_only = AuxRequest(lse=True)
    got, aux = flex_attention(
        qt,
        kt,
        vt,
        block_mask=_block_mask(_causal, "tpu"),
        scale=0.3,
        enable_gqa=True,
        return_aux=lse_only,
    )
    got.sum().backward()
    torch.testing.assert_close(got.cpu().double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kt.grad.cpu().double(), k.grad, atol=1e-4, rtol=1e-4)
    _, cpu_aux = flex_attention(
        *[t.detach().float() for t in (q, k, v)],
        block_mask=_block_mask(_causal, "cpu"),
        scale=0.3,
        enable_gqa=True,
        return_aux=lse_only,
    )
    torch.testing.assert_close(aux.lse.cpu(), cpu_aux.lse, atol=1e-5, rtol=1e-5)


def test_score_mod_buffer_gets_its_gradient():
    bias = torch.randn(H, dtype=torch.float64, requires_grad=True)
    q, k, v = [t.double().requires_grad_() for t in _inputs()]
    expected = _dense(q, k, v, lambda s, b, h, m, n: s + bias[h])
    expected.sum().backward()
    bias_t = bias.detach().float().to("tpu").requires_grad_()
    qt, kt, vt = _to_tpu(q.float(), k.float(), v.float())
    got = flex_attention(qt, kt, vt, score_mod=lambda s, b, h, m, n: s + bias_t[h])
    got.sum().backward()
    torch.testing.assert_close(bias_t.grad.cpu().double(), bias.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(qt.grad.cpu().double(), q.grad, atol=1e-4, rtol=1e-4)


class _Attention(torch.nn.Module):
    def __init__(self, block_mask):
        super().__init__()
        self.qkv = torch.nn.Linear(D * H, 3 * D * H)
        self.out = torch.nn.Linear(D * H, D * H)
        self.block_mask = block_mask

    def forward(self, x):
        q, k, v = self.qkv(x).view(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
        y = flex_attention(q, k, v, score_mod=_relative, block_mask=self.block_mask)
        return self.out(y.transpose(1, 2).reshape(B, S, H * D)).relu().sum()


def test_compiled_step_is_one_program_each_way():
    torch.manual_seed(0)
    model = _Attention(_block_mask(_causal, "tpu")).to("tpu")
    x = torch.randn(B, S, H * D, device="tpu")
    model(x).backward()
    expected = [p.grad.cpu() for p in model.parameters()]
    compiled = torch.compile(model, backend="tpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph run op by op warns
        for _ in range(2):
            model.zero_grad()
            torch_tpu.reset_metrics()
            loss = compiled(x)
            loss.backward()
            torch.tpu.synchronize()
    metrics = torch_tpu.metrics()
    # The forward graph's program, the backward's, and the backward's seed (ones).
    assert metrics["executions"] <= 3, metrics
    assert metrics["compiles"] == 0, metrics
    for p, ref in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad.cpu(), ref, atol=1e-4, rtol=1e-4)


def test_compiled_create_block_mask_on_tpu():
    got = torch.compile(create_block_mask)(_sliding, B, H, S, S, device="tpu", BLOCK_SIZE=8)
    expected = create_block_mask(_sliding, B, H, S, S, device="cpu", BLOCK_SIZE=8)
    assert got.kv_indices.device.type == "tpu"
    torch.testing.assert_close(got.to_dense().cpu(), expected.to_dense())
