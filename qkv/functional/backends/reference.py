"""The equations written out: scores, masked softmax, weighted sum (SPEC sections 1-3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..checks import check_causal
from ..masks import causal_mask
from ..softmax import masked_softmax
from . import AttentionCall, AttentionOutput, register_backend

__all__ = ["ReferenceBackend", "attention_weights"]


def attention_weights(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> Tensor:
    """alpha = softmax_j(scale * q_i . k_j) over the keys that may be attended.

    The equations, with or without grad: the fast way to the same weights without a
    gradient is the ``explicit`` backend.

    Shapes: (B, H, Tq, Dh), (B, H, Tk, Dh) -> (B, H, Tq, Tk).
    """
    check_causal(causal, query.shape[-2], key.shape[-2])
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


class ReferenceBackend:
    """The equations: supports every call, and returns weights that carry gradients."""

    name = "reference"

    def unsupported(self, call: AttentionCall) -> str | None:
        return None

    def run(self, call: AttentionCall) -> AttentionOutput:
        weights = attention_weights(call.query, call.key, call.mask, call.causal, call.scale)
        dropped = F.dropout(weights, call.dropout) if call.dropout > 0 else weights
        output = dropped @ call.value  # (B, H, Tq, Dv)
        return AttentionOutput(output, weights if call.need_weights else None)


register_backend(ReferenceBackend(), priority=100)
