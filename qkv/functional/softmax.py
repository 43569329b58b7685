"""Softmax over the keys that may be attended."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_softmax"]


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    r"""alpha_ij = softmax_j(e_ij) over the positions j where ``mask`` is True.

    $$\alpha_{ij} = \frac{m_{ij} \exp(e_{ij})}{\sum_{j'} m_{ij'} \exp(e_{ij'})},\qquad m_{ij} \in \{0, 1\}$$

    Masked positions get weight exactly 0.  A row whose every position is masked (or has
    an additive bias of -inf) gets all-zero weights, never NaN, and finite gradients.
    A NaN score makes its whole row NaN, as ``torch.softmax`` does (NaN in, NaN out), with
    or without gradients: a NaN is a bug upstream and is not hidden.
    ``mask`` is boolean (True = may attend) and broadcastable to ``scores``.

    Shapes: scores (..., Tk), mask broadcastable to it -> weights (..., Tk).
    """
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(
                f"masked_softmax takes a boolean mask (True = may attend), got {mask.dtype}"
            )
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = scores.detach().amax(dim, keepdim=True)  # -inf: nothing to attend; NaN: a NaN
    if not (torch.is_grad_enabled() and scores.requires_grad):
        # No gradient wanted (inference, weights for inspection): PyTorch's fused softmax,
        # whose rows with nothing to attend (0 / 0 = NaN) become zeros.
        weights = torch.softmax(scores, dim)
        empty = row_max == float("-inf")
        return weights.masked_fill_(empty, 0.0) if empty.any() else weights
    # Subtracting the row max keeps exp() in range; a detached shift leaves the gradient of
    # softmax unchanged (it is shift-invariant).  Fully masked rows have max -inf: shift by 0.
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
    exp = torch.exp(scores - row_max)  # exp(-inf) = 0 for masked positions
    total = exp.sum(dim, keepdim=True)  # 0 for a row with nothing to attend, NaN for a NaN
    return exp / total.masked_fill(total == 0, 1.0)
