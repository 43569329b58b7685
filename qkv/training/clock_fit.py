"""A schedule's length fitted to the clock: a run with ``max_minutes`` times its first steps
and ends the cosine at the steps the rest of its minutes allow.

Before the run, nothing knows how many updates a number of minutes buys: the speed depends
on the model, the batch, the machine and its load.  So a schedule that can be fitted
(``ScheduleKind.fits_clock``) starts with the length the other budgets give (``max_steps``,
``epochs``), or with none (the peak after the warm-up, held), and at step ``fit_step`` =
max(warm-up, ``MIN_FIT_STEP``) the trainer sets it to

    L = min(the length it has,  fit_step + remaining seconds x steps per second)

and the decay goes on from the lr it has reached to the floor at L (fitted at the warm-up's
end, from the peak: the schedule a known length L would have given).  The speed is timed on
the trainer's clock (validations and checkpoints included) from step ``FIRST_TIMED_STEP``
on: the steps before it pay one-offs (caches warm up).  Every process takes the mean of the
processes' estimates, so they agree.  The fitted schedule is saved in each checkpoint (the
state's ``schedule_steps`` and the multiplier's own state), so a resumed run keeps it; a run
resumed before it was fitted times its steps again.  A run that ends earlier than planned
(a slower machine) stops before its floor; one that runs longer (a faster one) trains its
last steps at the floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .config import TrainConfig
from .distributed import DistributedContext, all_reduce_sum
from .schedules import schedule_kind

__all__ = ["FIRST_TIMED_STEP", "MIN_FIT_STEP", "ClockFit", "on_the_clock"]

FIRST_TIMED_STEP = 10
MIN_FIT_STEP = 30


def on_the_clock(config: TrainConfig) -> bool:
    """Whether a new run of ``config`` fixes its schedule's length from the clock."""
    return config.max_minutes is not None and schedule_kind(config.schedule).fits_clock


@dataclass
class ClockFit:
    """The timing of a run's first steps, until the schedule's length is fixed.

    timed_step: the step after which the timing begins.
    fit_step: the step after which the length is fixed.
    budget_seconds: the clock's budget (``max_minutes`` in seconds, all sessions).
    other_budgets: the steps that max_steps / epochs allow (None: no such budget).
    """

    timed_step: int
    fit_step: int
    budget_seconds: float
    other_budgets: int | None
    timed_from: float | None = None  # the trainer's clock after ``timed_step``

    @classmethod
    def of(cls, config: TrainConfig, *, start_step: int, other_budgets: int | None) -> ClockFit:
        """The fit of a run starting (or resuming) at ``start_step``."""
        timed_step = start_step + FIRST_TIMED_STEP
        fit_step = max(config.warmup_steps, MIN_FIT_STEP, timed_step + FIRST_TIMED_STEP)
        return cls(timed_step, fit_step, 60.0 * config.max_minutes, other_budgets)

    def after_step(self, step: int, elapsed: float, context: DistributedContext) -> int | None:
        """Call after every update with the trainer's clock (seconds, all sessions); the
        schedule's length once it is fixed (after ``fit_step``: every process must call
        this at the same steps), else None."""
        if step == self.timed_step:
            self.timed_from = elapsed
        if step < self.fit_step or self.timed_from is None:
            return None
        rate = (step - self.timed_step) / max(elapsed - self.timed_from, 1e-9)  # steps/s
        planned = step + max(self.budget_seconds - elapsed, 0.0) * rate
        total = all_reduce_sum(torch.tensor(planned, dtype=torch.float64), context).item()
        length = max(math.floor(total / context.world_size), step + 1)
        return length if self.other_budgets is None else min(length, self.other_budgets)
