"""Learning-rate schedules as multipliers on a peak lr, wrapped in ``LambdaLR``.

``LambdaLR`` asks for the multiplier of update ``i`` (0-based: ``lambda(0)`` sets the lr of the
first update), so the functions below are written in 1-based update numbers ``step = i + 1``;
that way the first update has a non-zero lr and update number ``warmup_steps`` has the peak.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

__all__ = [
    "inverse_sqrt_multiplier",
    "cosine_multiplier",
    "inverse_sqrt_schedule",
    "cosine_schedule",
    "build_schedule",
]


def inverse_sqrt_multiplier(step: int, *, warmup_steps: int) -> float:
    """Vaswani et al. (2017): lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    Divided by its peak value d_model^-0.5 * warmup^-0.5 (at step = warmup) this is
    min(step / warmup, sqrt(warmup / step)): linear warm-up to 1, then 1/sqrt decay.
    ``step`` is 1-based; warmup_steps = 0 behaves like 1 (no warm-up, decay from step 1).
    """
    warmup = max(warmup_steps, 1)
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def cosine_multiplier(
    step: int, *, warmup_steps: int, total_steps: int, floor: float = 0.0
) -> float:
    """Linear warm-up to 1 over ``warmup_steps``, then half a cosine from 1 down to ``floor``
    at ``total_steps``, and ``floor`` after that.  ``step`` is 1-based."""
    step = max(step, 1)
    if step <= warmup_steps:
        return step / warmup_steps
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def inverse_sqrt_schedule(optimizer: Optimizer, *, warmup_steps: int) -> LambdaLR:
    """Inverse-square-root schedule peaking at the optimizer's lr after ``warmup_steps``."""
    return LambdaLR(optimizer, _one_based(inverse_sqrt_multiplier, warmup_steps=warmup_steps))


def cosine_schedule(
    optimizer: Optimizer, *, warmup_steps: int, total_steps: int, floor: float = 0.0
) -> LambdaLR:
    """Cosine schedule with warm-up; ``floor`` is the final lr as a fraction of the peak."""
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps} must be >= 1")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor={floor} must lie in [0, 1] (a fraction of the peak lr)")
    return LambdaLR(
        optimizer,
        _one_based(
            cosine_multiplier, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor
        ),
    )


def build_schedule(
    name: str,
    optimizer: Optimizer,
    *,
    warmup_steps: int,
    total_steps: int | None = None,
    floor: float = 0.0,
) -> LambdaLR:
    """The schedule called ``name`` ("inverse_sqrt" or "cosine")."""
    if name == "inverse_sqrt":
        return inverse_sqrt_schedule(optimizer, warmup_steps=warmup_steps)
    if name == "cosine":
        if total_steps is None:
            raise ValueError("the cosine schedule needs total_steps")
        return cosine_schedule(
            optimizer, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor
        )
    raise ValueError(f"unknown schedule {name!r}; use 'inverse_sqrt' or 'cosine'")


def _one_based(multiplier: Callable[..., float], **kwargs: float) -> Callable[[int], float]:
    def lr_lambda(index: int) -> float:
        return multiplier(index + 1, **kwargs)

    return lr_lambda
