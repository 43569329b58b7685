"""The learning-rate schedules' shapes: multipliers on a peak lr, wrapped in ``LambdaLR``
(the registry that names them is :mod:`qkv.training.schedules`).

``LambdaLR`` asks for the multiplier of update ``i`` (0-based: ``lambda(0)`` sets the lr of the
first update), so the functions below are written in 1-based update numbers ``step = i + 1``;
that way the first update has a non-zero lr and update number ``warmup_steps`` has the peak.

The plateau schedule also listens to the validations: ``PlateauLR.observe(valid_loss)``
(the trainer calls it after each validation) lowers the multiplier when the loss stops
improving.  Its state lives in ``PlateauMultiplier``'s attributes, which ``LambdaLR``'s
``state_dict`` saves for callable objects, so a resumed run continues with the same lr and
counters; ``CosineMultiplier``'s length, fixed after a run on the clock has started, is kept
the same way.
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
    "CosineMultiplier",
    "CosineLR",
    "PlateauMultiplier",
    "PlateauLR",
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
    optimizer: Optimizer, *, warmup_steps: int, total_steps: int | None, floor: float = 0.0
) -> CosineLR:
    """Cosine schedule with warm-up; ``floor`` is the final lr as a fraction of the peak.
    ``total_steps`` None: the length is set later (``CosineLR.fit_length``)."""
    if total_steps is not None and total_steps < 1:
        raise ValueError(f"total_steps={total_steps} must be >= 1")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor={floor} must lie in [0, 1] (a fraction of the peak lr)")
    return CosineLR(optimizer, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor)


class CosineMultiplier:
    """:func:`cosine_multiplier` whose length a run on the clock may set, or shorten, after
    it has started (it knows how many steps its minutes buy only once it has timed some).

    Linear warm-up to 1 over ``warmup_steps``; then ``start`` until ``decay_start`` (and for
    as long as ``total_steps`` is None); then half a cosine from ``start`` down to ``floor``
    at ``total_steps``, and ``floor`` after it.  Built with ``decay_start = warmup_steps``
    and ``start = 1`` it is :func:`cosine_multiplier`.  ``fitted``: a run on the clock has
    set the length already.  The attributes are the whole state (``LambdaLR`` checkpoints
    them), so a resumed run keeps what its first part set."""

    def __init__(self, *, warmup_steps: int, total_steps: int | None, floor: float):
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.floor = floor
        self.decay_start = warmup_steps
        self.start = 1.0
        self.fitted = False

    def __call__(self, index: int) -> float:
        """The multiplier of update ``index + 1`` (``LambdaLR``'s 0-based convention)."""
        step = index + 1
        if step <= self.warmup_steps:
            return step / self.warmup_steps
        if self.total_steps is None or step <= self.decay_start:
            return self.start
        span = max(self.total_steps - self.decay_start, 1)
        progress = min((step - self.decay_start) / span, 1.0)
        return self.floor + (self.start - self.floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


class CosineLR(LambdaLR):
    """Warm-up, then half a cosine down to ``floor`` at ``total_steps`` (``CosineMultiplier``).

    ``fit_length`` sets a length left open (None), or shortens it, and changes the lr of the
    next update at once: the decay goes on from the lr of the update just made, so the lr
    never jumps."""

    def __init__(
        self, optimizer: Optimizer, *, warmup_steps: int, total_steps: int | None, floor: float
    ):
        multiplier = CosineMultiplier(
            warmup_steps=warmup_steps, total_steps=total_steps, floor=floor
        )
        super().__init__(optimizer, multiplier)

    @property
    def multiplier(self) -> CosineMultiplier:
        return self.lr_lambdas[0]  # LambdaLR shares the one object across param groups

    @property
    def length(self) -> int | None:
        return self.multiplier.total_steps

    def fit_length(self, total_steps: int) -> int | None:
        """After the updates made so far, end the decay at ``total_steps`` if the schedule has
        no length or a longer one (a length already shorter is kept); once only.  Returns
        the length now."""
        multiplier = self.multiplier
        if multiplier.fitted:
            raise ValueError(f"the schedule's length was fitted already ({self.length} steps)")
        if total_steps < 1:
            raise ValueError(f"total_steps={total_steps} must be >= 1")
        multiplier.fitted = True
        if multiplier.total_steps is not None and multiplier.total_steps <= total_steps:
            return multiplier.total_steps
        done = self.last_epoch  # updates made
        multiplier.start = multiplier(done - 1) if done > 0 else 1.0
        multiplier.decay_start = max(multiplier.warmup_steps, done)
        multiplier.total_steps = total_steps
        _set_next_lr(self)
        return total_steps


class PlateauMultiplier:
    """Linear warm-up to 1 over ``warmup_steps``, then constant; the constant (``scale``) is
    multiplied by ``factor`` each time the validation loss has not improved (strictly
    decreased below its best) for ``patience`` validations in a row, never below ``floor``.

    Validations before warm-up ends (``step < warmup_steps``) set the best loss but never
    count against it: the lr is still rising.  After a decay the count starts again, so the
    next decay needs ``patience`` more validations without improvement.  A NaN loss never
    improves.  The attributes are the whole state (``LambdaLR`` checkpoints them).
    """

    def __init__(self, *, warmup_steps: int, factor: float, patience: int, floor: float = 0.0):
        if not 0.0 < factor < 1.0:
            raise ValueError(f"plateau_factor={factor} must lie in (0, 1) (it lowers the lr)")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"plateau_patience={patience!r} must be a whole number >= 1")
        if not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor={floor} must lie in [0, 1] (a fraction of the peak lr)")
        self.warmup_steps = warmup_steps
        self.factor = factor
        self.patience = patience
        self.floor = floor
        self.scale = 1.0
        self.best: float | None = None
        self.bad_validations = 0

    def __call__(self, index: int) -> float:
        """The multiplier of update ``index + 1`` (``LambdaLR``'s 0-based convention)."""
        step = index + 1
        warm = min(step / self.warmup_steps, 1.0) if self.warmup_steps > 0 else 1.0
        return warm * self.scale

    def observe(self, valid_loss: float, *, step: int) -> bool:
        """Record the validation loss measured after ``step`` updates; True when the
        multiplier decayed."""
        if not math.isnan(valid_loss) and (self.best is None or valid_loss < self.best):
            self.best, self.bad_validations = valid_loss, 0
            return False
        if step < self.warmup_steps:
            return False
        self.bad_validations += 1
        if self.bad_validations < self.patience:
            return False
        self.bad_validations = 0
        lowered = max(self.scale * self.factor, self.floor)
        decayed = lowered < self.scale
        self.scale = lowered
        return decayed


class PlateauLR(LambdaLR):
    """Warm-up, then a constant lr lowered on validation plateaus (``PlateauMultiplier``).

    ``observe`` changes the lr of the *next* update at once (the optimizer's param groups
    and ``get_last_lr``), not one step later."""

    def __init__(
        self,
        optimizer: Optimizer,
        *,
        warmup_steps: int,
        factor: float,
        patience: int,
        floor: float = 0.0,
    ):
        multiplier = PlateauMultiplier(
            warmup_steps=warmup_steps, factor=factor, patience=patience, floor=floor
        )
        super().__init__(optimizer, multiplier)

    @property
    def multiplier(self) -> PlateauMultiplier:
        return self.lr_lambdas[0]  # LambdaLR shares the one object across param groups

    def observe(self, valid_loss: float) -> bool:
        """Record a validation loss; True when the lr decayed."""
        if not self.multiplier.observe(valid_loss, step=self.last_epoch):
            return False
        _set_next_lr(self)
        return True


def _set_next_lr(scheduler: LambdaLR) -> None:
    """Give the next update the lr of the scheduler's multiplier now (after a change to the
    multiplier's state), not one step later."""
    rates = [base * scheduler.lr_lambdas[0](scheduler.last_epoch) for base in scheduler.base_lrs]
    for group, lr in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = lr
    scheduler._last_lr = rates  # what LRScheduler.step would have set: get_last_lr reads it


def _one_based(multiplier: Callable[..., float], **kwargs: float) -> Callable[[int], float]:
    def lr_lambda(index: int) -> float:
        return multiplier(index + 1, **kwargs)

    return lr_lambda
