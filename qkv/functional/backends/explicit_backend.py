"""The "explicit" backend: the weights written once, and the output and backward read from them.

It serves calls that want the (B, H, Tq, Tk) weights without differentiating through them
-- inspection, the explorer, a layer's ``need_weights`` under ``torch.no_grad()`` -- with
the kernel of :mod:`.explicit`: one weight matrix, filled block by block while in cache,
gives the weights, the output and (for gradients to q, k and v) the backward.  The
``reference`` backend stays the equations; this is the fast path beside it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import AttentionCall, AttentionOutput, register_backend
from .chunked_kernel import compute_dtype
from .explicit import (
    additive_mask,
    causal_band,
    explicit_attention,
    plan_blocks,
    softmax_block,
)

__all__ = ["ExplicitBackend", "inspection_weights"]


def inspection_weights(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """softmax(scale * q k^T, masked) without autograd, at the cost of writing it once.

    The scale goes on the queries (Tq x Dh, not Tq x Tk), the mask is added as a bias, and
    a large matrix is filled a block at a time (:func:`softmax_block` over a
    :class:`BlockPlan`) -- scores, mask and softmax in place while the block is in cache,
    where the equations make four passes over memory.  Any floating dtype.

    Shapes: query (B, H, Tq, Dh), key (B, H, Tk, Dh) as in an :class:`AttentionCall`
    -> (B, H, Tq, Tk).
    """
    shape = (*query.shape[:-1], key.shape[-2])
    with torch.no_grad():
        weights = query.new_empty(shape)
        queries, keys_t = query * scale, key.transpose(-2, -1)
        bias = additive_mask(mask, weights.dtype)
        if bias is not None:
            bias = bias.expand(shape)  # a view: slicing it per block copies nothing
        plan = plan_blocks(shape, weights.element_size(), causal)
        band = causal_band(plan.band, weights.dtype, query.device) if causal else None
        for block in plan.blocks:
            softmax_block(weights, queries, keys_t, bias, band, block)
    return weights


def _wants_grad(call: AttentionCall) -> bool:
    tensors = (call.query, call.key, call.value, call.mask)
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


class ExplicitBackend:
    """Weights written once and reused by the output and the backward; the weights it
    returns carry no gradient.  Half precision is computed in float32."""

    name = "explicit"

    def unsupported(self, call: AttentionCall) -> str | None:
        # supports_explicit's conditions but the dtype: half precision is run in float32
        if call.dropout > 0:
            return "dropout on the weights (the returned weights would not be the ones used)"
        if call.mask is not None and call.mask.is_floating_point() and call.mask.requires_grad:
            return "a float bias that requires grad"
        if call.need_weights and _wants_grad(call):
            return (
                "need_weights with gradients: its weights carry none (reference "
                "differentiates through them; weights_grad=False asks for inspection)"
            )
        return None

    def run(self, call: AttentionCall) -> AttentionOutput:
        dtype = compute_dtype(call.query.dtype)
        query, key, value = (t.to(dtype) for t in (call.query, call.key, call.value))
        mask = call.mask
        if mask is not None and mask.is_floating_point():
            mask = mask.to(dtype)
        output, weights = explicit_attention(query, key, value, mask, call.causal, call.scale)
        weights = weights.to(call.query.dtype) if call.need_weights else None
        return AttentionOutput(output.to(call.query.dtype), weights)


register_backend(ExplicitBackend(), priority=75)
