"""The tpu experts kernel and routing ops against a per-token loop on the CPU
(`make test-vllm`, in the serving environment). The checks run in a child process
(`device_process`): the test process must not hold the device, which the engines of
the other tests take."""

import multiprocessing

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
from vllm_torch_tpu.moe import MoEActivation, routed_experts, top_k_routing

EXPERTS, HIDDEN, INTER, TOP_K = 8, 16, 12, 2


@pytest.fixture(scope="module")
def device_process():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield lambda fn, *args: pool.apply(fn, args)


def per_token_loop(x, w13, w2, weights, ids, b13, b2):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for w, e in zip(weights[t].tolist(), ids[t].tolist()):
            if e < 0:
                continue
            gate, up = (w13[e] @ x[t] + b13[e]).chunk(2)
            out[t] += w * (w2[e] @ (F.silu(gate) * up) + b2[e])
    return out


# 3 tokens x top-2 <= 8 experts gathers each pair's weights; 9 tokens runs every
# expert on every token.
@pytest.mark.parametrize("tokens", [3, 9])
def test_routed_experts_equal_per_token_loop(device_process, tokens):
    device_process(routed_experts_equal_per_token_loop, tokens)


def routed_experts_equal_per_token_loop(tokens):
    g = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, HIDDEN, generator=g)
    w13 = torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=g) / 4
    w2 = torch.randn(EXPERTS, HIDDEN, INTER, generator=g) / 4
    b13, b2 = (
        torch.randn(EXPERTS, 2 * INTER, generator=g),
        torch.randn(EXPERTS, HIDDEN, generator=g),
    )
    logits = torch.randn(tokens, EXPERTS, generator=g)
    weights, ids = top_k_routing(logits.softmax(-1), TOP_K, True, None)
    ids = ids.to(torch.int32)
    # An expert map with two experts on another rank (-1): their pairs add nothing.
    expert_map = torch.arange(EXPERTS, dtype=torch.int32)
    expert_map[[1, 6]] = -1
    want = per_token_loop(x, w13, w2, weights, expert_map[ids.long()], b13, b2)
    tpu = [t.to("tpu") for t in (x, w13, w2, weights, ids, b13, b2, expert_map)]
    got = routed_experts(
        *tpu[:5], MoEActivation.SILU, w13_bias=tpu[5], w2_bias=tpu[6], expert_map=tpu[7]
    )
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_unsupported_activation_names_itself(device_process):
    device_process(unsupported_activation_names_itself)


def unsupported_activation_names_itself():
    x = torch.zeros(1, HIDDEN, device="tpu")
    w = torch.zeros(EXPERTS, HIDDEN, HIDDEN, device="tpu")
    ids = torch.zeros(1, TOP_K, dtype=torch.int32, device="tpu")
    with pytest.raises(NotImplementedError, match="swigluoai"):
        routed_experts(x, w, w, ids.float(), ids, MoEActivation.SWIGLUOAI)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_routing_ops_choose_the_top_experts(device_process, scoring):
    device_process(routing_ops_choose_the_top_experts, scoring)


def routing_ops_choose_the_top_experts(scoring):
    logits = torch.randn(5, EXPERTS, generator=torch.Generator().manual_seed(0))
    scores = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
    want_w, want_i = scores.topk(TOP_K, dim=-1)
    want_w = want_w / want_w.sum(-1, keepdim=True)
    w = torch.empty(5, TOP_K, device="tpu")
    i = torch.empty(5, TOP_K, dtype=torch.int32, device="tpu")
    t = torch.empty(5, TOP_K, dtype=torch.int32, device="tpu")
    getattr(torch.ops._moe_C, f"topk_{scoring}")(w, i, t, logits.to("tpu"), True)
    torch.testing.assert_close(w.cpu(), want_w)
    assert i.cpu().tolist() == want_i.int().tolist()
    assert t.cpu()[:, 1].tolist() == [5 + r for r in range(5)]
