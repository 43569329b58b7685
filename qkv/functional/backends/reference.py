"""The equations written out: scores, masked softmax, weighted sum (SPEC sections 1-3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..masks import causal_mask
from ..softmax import masked_softmax
from . import AttentionCall, AttentionOutput, register_backend

__all__ = ["ReferenceBackend", "attention_weights"]


def attention_weights(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """alpha = softmax_j(scale * q_i . k_j) over the keys that may be attended.

    Shapes: (B, H, Tq, Dh), (B, H, Tk, Dh) -> (B, H, Tq, Tk).
    """
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


#: Weight matrices at least this large are filled block by block (see below).
_BLOCKED_FROM_BYTES = 8 * 2**20
#: Elements per block: 256 KiB of float32, so a block stays in cache between its passes.
_BLOCK_ELEMENTS = 2**16


def _weights_for_inspection(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """The same weights without autograd, at the cost of writing them once.

    The scale goes on the queries (Tq x Dh, not Tq x Tk).  A large (B, H, Tq, Tk) matrix
    is filled a block of rows at a time: scores, mask and softmax in place while the
    block is in cache, so the only pass over main memory is the write of the result (a
    plain version makes four: scores, masked copy, softmax, NaN fix).  This is what a
    layer's ``need_weights`` costs.
    """
    scores_shape = (*query.shape[:-1], key.shape[-2])
    queries = query * scale
    keys_t = key.transpose(-2, -1)
    above = None
    if causal:  # end-aligned: every row sees at least one key, so causal alone never blanks one
        above = causal_mask(query.shape[-2], key.shape[-2], device=query.device).logical_not()
    weights = torch.empty(scores_shape, dtype=torch.result_type(query, key), device=query.device)
    too_small = weights.numel() * weights.element_size() < _BLOCKED_FROM_BYTES
    if too_small or query.dim() != 4 or key.shape[:2] != query.shape[:2]:
        torch.matmul(queries, keys_t, out=weights)
        _mask_and_normalise(weights, mask, above)
        return weights
    batch, heads, length, keys = scores_shape
    if mask is not None:
        mask = mask.expand(scores_shape)  # a view: slicing it below copies nothing
    rows = max(1, _BLOCK_ELEMENTS // keys)
    for b in range(batch):
        for h in range(heads):
            for start in range(0, length, rows):
                block = slice(start, start + rows)
                out = weights[b, h, block]  # (rows, Tk), a view into the result
                torch.matmul(queries[b, h, block], keys_t[b, h], out=out)
                _mask_and_normalise(
                    out,
                    None if mask is None else mask[b, h, block],
                    None if above is None else above[block],
                )
    return weights


def _mask_and_normalise(scores: Tensor, mask: Tensor | None, above: Tensor | None) -> None:
    """In place: blocked positions to -inf, then softmax over the last dim; rows with
    nothing to attend become zeros."""
    if mask is not None and mask.dtype == torch.bool:
        scores.masked_fill_(mask.logical_not(), float("-inf"))
    elif mask is not None:
        scores += mask
    if above is not None:
        scores.masked_fill_(above, float("-inf"))
    torch.softmax(scores, dim=-1, out=scores)
    if mask is not None:
        scores.nan_to_num_(0.0)


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
