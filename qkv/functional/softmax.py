"""Softmax over the keys that may be attended."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_softmax"]


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """alpha_ij = softmax_j(e_ij) over the positions j where ``mask`` is True.

    Masked positions get weight exactly 0.  A row whose every position is masked (or has
    an additive bias of -inf) gets all-zero weights, never NaN, and finite gradients.
    ``mask`` is boolean (True = may attend) and broadcastable to ``scores``.

    Shapes: scores (..., Tk), mask broadcastable to it -> weights (..., Tk).
    """
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(
                f"masked_softmax takes a boolean mask (True = may attend), got {mask.dtype}"
            )
        scores = scores.masked_fill(~mask, float("-inf"))
    if not (torch.is_grad_enabled() and scores.requires_grad):
        # No gradient wanted (inference, weights for inspection): PyTorch's fused softmax,
        # whose NaN rows (nothing to attend) become zeros.
        return torch.softmax(scores, dim).nan_to_num_(0.0)
    # Subtracting the row max keeps exp() in range; a detached shift leaves the gradient of
    # softmax unchanged (it is shift-invariant).  Fully masked rows have max -inf: shift by 0.
    row_max = scores.detach().amax(dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(scores - row_max)  # exp(-inf) = 0 for masked positions
    total = exp.sum(dim, keepdim=True)
    return exp / torch.where(total > 0, total, torch.ones_like(total))
