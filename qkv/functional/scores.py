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


def _number(value: object) -> float:
    """``value`` as a float, NaN when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return math.nan


def resolve_scale(score: str, scale: float | None, head_dim: int) -> float:
    """The factor on q.k for a named parameter-free score."""
    if score == "scaled_dot":
        if scale is None:
            return 1.0 / math.sqrt(head_dim)
        # a NaN or inf factor gives NaN weights, a string would be read as a number
        if isinstance(scale, (bool, str)) or not math.isfinite(_number(scale)):
            raise InputError(
                f"scale={scale!r} must be a finite number (default: 1 / sqrt(Dh) = "
                f"{1.0 / math.sqrt(head_dim):.4g})"
            )
        return float(scale)
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
