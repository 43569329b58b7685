"""The equations written out: scores, masked softmax, weighted sum (SPEC sections 1-3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checks import check_causal
from ..masks import causal_mask
from ..softmax import masked_softmax
from . import AttentionCall, AttentionOutput, register_backend
from .explicit import additive_mask, causal_band, mask_and_normalise, plan_blocks, softmax_block

__all__ = ["ReferenceBackend", "attention_weights"]


def attention_weights(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """alpha = softmax_j(scale * q_i . k_j) over the keys that may be attended.

    Shapes: (B, H, Tq, Dh), (B, H, Tk, Dh) -> (B, H, Tq, Tk).
    """
    check_causal(causal, query.shape[-2], key.shape[-2])
    if not _wants_grad(query, key, mask):
        return _weights_for_inspection(query, key, mask, causal, scale)
    scores = (query @ key.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    keep = None
    if mask is not None and mask.dtype == torch.bool:
        keep = mask
    elif mask is not None:
        scores = scores + mask  # additive bias (ALiBi, relative positions, -inf = blocked)
    if causal:
        below = causal_mask(query.shape[-2], key.shape[-2], device=query.device)
        keep = below if keep is None else keep & below
    return masked_softmax(scores, keep)  # (B, H, Tq, Tk)


def _wants_grad(*tensors: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _weights_for_inspection(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """The same weights without autograd, at the cost of writing them once: the scale goes
    on the queries (Tq x Dh, not Tq x Tk), the mask is added as a bias, and a large matrix
    is filled a block at a time (:func:`softmax_block` over a :class:`BlockPlan`) -- scores,
    mask and softmax in place while the block is in cache (a plain version makes four passes
    over memory: scores, masked copy, softmax, NaN fix).  This is what a layer's ``need_weights`` costs when it
    needs no gradient."""
    shape = (*query.shape[:-1], key.shape[-2])
    weights = torch.empty(shape, dtype=torch.result_type(query, key), device=query.device)
    queries, keys_t = query * scale, key.transpose(-2, -1)
    bias = additive_mask(mask, weights.dtype)
    if query.dim() != 4 or key.shape[:2] != query.shape[:2]:  # broadcasting: one batched op
        torch.matmul(queries, keys_t, out=weights)
        band = causal_band(shape[-2], weights.dtype, query.device) if causal else None
        mask_and_normalise(weights, bias, band)
        return weights
    if bias is not None:
        bias = bias.expand(shape)  # a view: slicing it per block copies nothing
    plan = plan_blocks(shape, weights.element_size(), causal)
    band = causal_band(plan.band, weights.dtype, query.device) if causal else None
    for block in plan.blocks:
        softmax_block(weights, queries, keys_t, bias, band, block)
    return weights


class ReferenceBackend:
    """Readable and general: supports every call, and is the one that returns weights."""

    name = "reference"

    def unsupported(self, call: AttentionCall) -> str | None:
        return None

    def run(self, call: AttentionCall) -> AttentionOutput:
        weights = attention_weights(call.query, call.key, call.mask, call.causal, call.scale)
        dropped = F.dropout(weights, call.dropout) if call.dropout > 0 else weights
        output = dropped @ call.value  # (B, H, Tq, Dv)
        return AttentionOutput(output, weights if call.need_weights else None)


register_backend(ReferenceBackend(), priority=100)
