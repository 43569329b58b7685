"""What the explorer computes from attention weights: rollout, per-head summaries, rounding.

Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"):
a residual connection carries each position's own vector past the attention, so each layer
is modelled as ``A_hat = 0.5 * A + 0.5 * I`` with rows renormalised to sum to 1, where ``A``
is the layer's attention averaged over heads; the attention of layer ``l`` traced back to the
input tokens is the product ``R_l = A_hat_l @ A_hat_(l-1) @ ... @ A_hat_1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from qkv.errors import InputError, NotFiniteError

__all__ = ["WEIGHT_SCALE", "attention_rollout", "head_summary", "quantize"]

#: Weights go into the page as integers ``round(w * WEIGHT_SCALE)``: 4 decimal places (an
#: error of at most 0.00005, far below what a colour can show), 4-5 characters a number.
WEIGHT_SCALE = 10_000


def attention_rollout(layers: Sequence[Tensor], *, residual: float = 0.5) -> list[Tensor]:
    """The rollout after each layer: ``R_1 = A_hat_1``, ``R_l = A_hat_l @ R_(l-1)``.

    ``layers``: per layer the attention averaged over heads, or with a leading head
    dimension (then averaged here).  ``residual``: the identity's share in ``A_hat``.

    Shapes: per layer (T, T) or (H, T, T) -> per layer (T, T), rows summing to 1.
    """
    if not layers:
        raise InputError("attention_rollout needs the attention of at least one layer")
    if not 0.0 <= residual <= 1.0:
        raise InputError(f"residual={residual} must be between 0 and 1")
    rollout: list[Tensor] = []
    current = None
    for index, weights in enumerate(layers):
        weights = weights.double()
        if weights.dim() == 3:
            weights = weights.mean(dim=0)  # (T, T): the heads averaged
        if weights.dim() != 2 or weights.shape[0] != weights.shape[1]:
            raise InputError(
                f"layer {index}: rollout needs square self-attention (T, T) or (H, T, T), "
                f"got {tuple(layers[index].shape)}"
            )
        if current is not None and weights.shape != current.shape:
            raise InputError(
                f"layer {index} has {weights.shape[0]} positions, layer 0 had {current.shape[0]}"
            )
        identity = torch.eye(weights.shape[0], dtype=weights.dtype, device=weights.device)
        mixed = (1.0 - residual) * weights + residual * identity
        mixed = mixed / mixed.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        current = mixed if current is None else mixed @ current
        rollout.append(current.float())
    return rollout


def head_summary(weights: Tensor, *, self_attention: bool) -> dict[str, float | None]:
    """What makes a head worth a look, each averaged over the query rows.

    entropy: of each row's weights, in bits (0: one key takes everything; log2(Tk): uniform).
    diagonal / previous: the weight on the query's own position / the one before it
        (self-attention only, else None).
    first: the weight on the first key (often a "no-op" sink).

    Shapes: weights (Tq, Tk) -> a dict of floats.
    """
    if weights.dim() != 2 or 0 in weights.shape:
        raise InputError(f"head_summary takes one (Tq, Tk) matrix, got {tuple(weights.shape)}")
    weights = weights.double()
    logs = torch.where(weights > 0, weights.clamp_min(1e-300).log2(), 0.0)
    entropy = -(weights * logs).sum(dim=-1).mean()
    summary: dict[str, float | None] = {
        "entropy": _rounded(entropy),
        "diagonal": None,
        "previous": None,
        "first": _rounded(weights[:, 0].mean()),
    }
    if self_attention:
        summary["diagonal"] = _rounded(weights.diagonal().mean())
        below = weights.diagonal(offset=-1)
        summary["previous"] = _rounded(below.mean()) if below.numel() else 0.0
    return summary


def quantize(weights: Tensor) -> list[list[int]]:
    """A weight matrix as the page stores it: row-major nested lists of
    ``round(w * WEIGHT_SCALE)``.  Shapes: (Tq, Tk) -> Tq lists of Tk ints."""
    if weights.dim() != 2:
        raise InputError(f"quantize takes one (Tq, Tk) matrix, got {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()):
        raise NotFiniteError(
            "the model's attention weights hold NaN or inf: its weights are not finite numbers "
            "(a diverged run, a corrupt file)"
        )
    return (weights.double() * WEIGHT_SCALE).round().long().tolist()


def _rounded(value: Tensor) -> float:
    number = float(value)
    return 0.0 if number == 0 else round(number, 3 - int(math.floor(math.log10(abs(number)))))
