"""The parameter-free scores :func:`qkv.functional.attention` accepts by name (SPEC section 1).

    "scaled_dot": e_ij = q_i . k_j / sqrt(d_k)  (or * ``scale``)     "dot": e_ij = q_i . k_j

Both become one factor on q . k, applied inside the attention backends.  Scores as modules
(dot, scaled dot, bilinear, additive), for layers that attend over a set of inputs, live in
:mod:`qkv.layers.scores`.
"""

from __future__ import annotations

import math

from ..errors import InputError

__all__ = ["resolve_scale", "SCORES"]

#: The score names :func:`qkv.functional.attention` accepts.
SCORES = ("dot", "scaled_dot")


def resolve_scale(score: str, scale: float | None, head_dim: int) -> float:
    """The factor on q.k for a named parameter-free score."""
    if score == "scaled_dot":
        return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    if score == "dot":
        if scale is not None:
            raise InputError(
                f"score='dot' takes no scale (got scale={scale}); use score='scaled_dot'"
            )
        return 1.0
    raise InputError(
        f"unknown score {score!r} for functional attention; choose from {SCORES}. "
        "Parameterised scores (bilinear, additive) are modules: qkv.layers.scores"
    )
