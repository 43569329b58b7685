"""Parameter-free alignment scores e_ij = a(q_i, k_j) (SPEC section 1).

Parameterised scores (bilinear, additive) own weights and live in :mod:`qkv.layers.scores`.
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = ["dot_scores", "scaled_dot_scores", "resolve_scale", "SCORES"]

#: The score names :func:`qkv.functional.attention` accepts.
SCORES = ("dot", "scaled_dot")


def dot_scores(query: Tensor, key: Tensor) -> Tensor:
    """e_ij = q_i . k_j.  Shapes: (..., Tq, Dh), (..., Tk, Dh) -> (..., Tq, Tk)."""
    return query @ key.transpose(-2, -1)


def scaled_dot_scores(query: Tensor, key: Tensor, scale: float | None = None) -> Tensor:
    """e_ij = q_i . k_j / sqrt(d_k): the Transformer's score; the scale keeps the softmax
    out of saturation as d_k grows.  Shapes as :func:`dot_scores`."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return (query @ key.transpose(-2, -1)) * scale


def resolve_scale(score: str, scale: float | None, head_dim: int) -> float:
    """The factor on q.k for a named parameter-free score."""
    if score == "scaled_dot":
        return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if score == "dot":
        if scale is not None:
            raise ValueError(
                f"score='dot' takes no scale (got scale={scale}); use score='scaled_dot'"
            )
        return 1.0
    raise ValueError(
        f"unknown score {score!r} for functional attention; choose from {SCORES}. "
        "Parameterised scores (bilinear, additive) are modules: qkv.layers.scores"
    )
