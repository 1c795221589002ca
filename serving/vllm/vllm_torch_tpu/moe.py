"""Mixture of experts on the tpu device. vLLM leaves the experts of an out-of-tree
platform to the platform (`UnquantizedMoeBackend.OOT`) and routes tokens with its
CUDA kernels (`_moe_C.topk_softmax`/`topk_sigmoid`); both are here in torch ops, so
that each layer is a few static-shape programs whatever experts the tokens chose."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

# Elements of the [tokens, experts, features] intermediate of one chunk of tokens
# run through every expert (64 Mi: 256 MiB in float32).
DENSE_CHUNK_ELEMENTS = 64 * 1024 * 1024


def _gated(act):
    def apply(h: torch.Tensor) -> torch.Tensor:
        gate, up = h.chunk(2, dim=-1)
        return act(gate) * up

    return apply


ACTIVATIONS = {
    MoEActivation.SILU: _gated(F.silu),
    MoEActivation.GELU: _gated(F.gelu),
    MoEActivation.GELU_TANH: _gated(lambda g: F.gelu(g, approximate="tanh")),
    MoEActivation.SILU_NO_MUL: F.silu,
    MoEActivation.GELU_NO_MUL: F.gelu,
    MoEActivation.GELU_TANH_NO_MUL: lambda h: F.gelu(h, approximate="tanh"),
    MoEActivation.RELU2_NO_MUL: lambda h: F.relu(h).square(),
}


def routed_experts(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: MoEActivation = MoEActivation.SILU,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
    apply_router_weight_on_input: bool = False,
) -> torch.Tensor:
    """Sum over each token's chosen experts of weight * w2 @ act(w13 @ x + b13) + b2.

    x [T, H], w13 [E, U, H], w2 [E, H, I], topk_* [T, K]; `expert_map` maps global
    expert ids to this rank's (-1: not here). Two static-shape forms, chosen by the
    shapes alone: when there are no more (token, expert) pairs than experts (decode)
    each pair gathers its expert's weights, reading no more than all experts once;
    otherwise every expert runs on every token and the pairs weight the results, in
    chunks of tokens that bound the intermediate. The second costs E / K times the
    arithmetic of a grouped matmul (a ragged dot), which is the next step."""
    act = ACTIVATIONS.get(activation)
    if act is None:
        raise NotImplementedError(
            f"MoE activation {activation.value!r} is not supported on tpu; "
            f"supported: {sorted(a.value for a in ACTIVATIONS)}"
        )
    if expert_map is not None:
        topk_ids = expert_map[topk_ids.long()]
    ids = topk_ids.long()
    weights = torch.where(ids >= 0, topk_weights.to(x.dtype), 0)
    ids = ids.clamp(min=0)
    if apply_router_weight_on_input:
        if ids.shape[1] != 1:
            raise ValueError("apply_router_weight_on_input needs one expert a token (top-k 1)")
        x = x * weights
        weights = torch.ones_like(weights)
    num_tokens, top_k = ids.shape
    num_experts = w13.shape[0]
    if num_tokens * top_k <= num_experts:
        h = torch.einsum("th,tkuh->tku", x, w13[ids])
        if w13_bias is not None:
            h = h + w13_bias[ids]
        y = torch.einsum("tki,tkhi->tkh", act(h), w2[ids])
        if w2_bias is not None:
            y = y + w2_bias[ids]
        return torch.einsum("tk,tkh->th", weights, y)
    # [T, E]: each token's weight for each expert, 0 where it did not choose it.
    combine = torch.zeros(num_tokens, num_experts, dtype=x.dtype, device=x.device)
    combine = combine.scatter_add(1, ids, weights)
    features = max(w13.shape[1], w2.shape[1])
    chunk = max(1, DENSE_CHUNK_ELEMENTS // (num_experts * features))
    out = []
    for start in range(0, num_tokens, chunk):
        xs, cs = x[start : start + chunk], combine[start : start + chunk]
        h = torch.einsum("th,euh->teu", xs, w13)
        if w13_bias is not None:
            h = h + w13_bias
        y = torch.einsum("tei,ehi->teh", act(h), w2)
        if w2_bias is not None:
            y = y + w2_bias
        out.append(torch.einsum("te,teh->th", cs, y))
    return out[0] if len(out) == 1 else torch.cat(out)


@UnquantizedFusedMoEMethod.register_oot
class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    """vLLM's unquantized experts with `routed_experts` as the kernel: the modular
    path (vLLM's router picks the experts, then `apply`)."""

    @property
    def is_monolithic(self) -> bool:
        return False

    @property
    def topk_indices_dtype(self) -> torch.dtype | None:
        return None

    def apply(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input):
        # The runner has run the shared experts already (their order is NO_OVERLAP
        # without a modular kernel to overlap them with).
        return routed_experts(
            x,
            layer.w13_weight,
            layer.w2_weight,
            topk_weights,
            topk_ids,
            activation=layer.activation,
            w13_bias=getattr(layer, "w13_bias", None) if self.moe.has_bias else None,
            w2_bias=getattr(layer, "w2_bias", None) if self.moe.has_bias else None,
            expert_map=layer.expert_map,
            apply_router_weight_on_input=layer.apply_router_weight_on_input,
        )

    forward_native = apply
    forward_oot = apply


def top_k_routing(
    scores: torch.Tensor, top_k: int, renormalize: bool, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's `top_k` experts by score (plus `bias` when given, which chooses
    the experts but does not weigh them) and their float32 weights."""
    choose = scores if bias is None else scores + bias.to(scores.dtype)
    ids = choose.topk(top_k, dim=-1).indices
    weights = scores.gather(-1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def _define_routing_ops() -> None:
    """`_moe_C.topk_softmax`/`topk_sigmoid` (vLLM's routing kernels; its CUDA build
    defines them, ours has none) for the tpu device. Padding rows (`is_padding`) are
    routed like any: their results are never read."""
    ns = torch.ops._moe_C
    lib = torch.library.Library("_moe_C", "FRAGMENT")
    outs = "Tensor(a!) topk_weights, Tensor(b!) topk_ids, Tensor(c!) token_expert_indices"
    if not hasattr(ns, "topk_softmax"):
        lib.define(
            f"topk_softmax({outs}, Tensor gating_output, bool renormalize, "
            "Tensor? bias=None, Tensor? is_padding=None) -> ()"
        )
    if not hasattr(ns, "topk_sigmoid"):
        lib.define(
            f"topk_sigmoid({outs}, Tensor gating_output, bool renormalize, "
            "Tensor? bias=None, float routed_scaling_factor=1.0, Tensor? is_padding=None) -> ()"
        )

    def write(topk_weights, topk_ids, token_expert_indices, weights, ids):
        topk_weights.copy_(weights)
        topk_ids.copy_(ids)
        # The kernel's [T, K] slot numbers: k * T + t.
        tokens, top_k = ids.shape
        slots = torch.arange(top_k, device=ids.device) * tokens
        token_expert_indices.copy_(slots + torch.arange(tokens, device=ids.device)[:, None])

    def topk_softmax(w, i, t, gating_output, renormalize, bias=None, is_padding=None):
        scores = gating_output.float().softmax(dim=-1)
        write(w, i, t, *top_k_routing(scores, i.shape[1], renormalize, bias))

    def topk_sigmoid(
        w, i, t, gating_output, renormalize, bias=None, routed_scaling_factor=1.0, is_padding=None
    ):
        scores = gating_output.float().sigmoid()
        weights, ids = top_k_routing(scores, i.shape[1], renormalize, bias)
        write(w, i, t, weights * routed_scaling_factor, ids)

    lib.impl("topk_softmax", topk_softmax, "PrivateUse1")
    lib.impl("topk_sigmoid", topk_sigmoid, "PrivateUse1")
    _LIBRARIES.append(lib)


# A Library's registrations last as long as the object.
_LIBRARIES: list[torch.library.Library] = []
_define_routing_ops()
