"""When the training loop stops, logs and validates: small decisions, each testable alone.

The loop (``Trainer``) walks an epoch's batches in groups of ``accumulate``; before each step
the processes agree on the step's token count and on whether any of them must stop (time
budget spent, a signal received); after it, the budgets, the log cadence and the validation
cadence decide what happens next.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .config import TrainConfig
from .distributed import DistributedContext, all_reduce_sum
from .state import TrainerState

__all__ = [
    "StepAgreement",
    "agree_before_step",
    "budget_spent",
    "collect_young_garbage_only",
    "log_now",
    "step_groups",
    "validate_now",
]


def step_groups(
    batches: list[list[int]], *, position: int, accumulate: int
) -> Iterator[list[list[int]]]:
    """The groups of ``accumulate`` batches still to train in an epoch, from ``position`` on
    (the last group of an epoch may be shorter)."""
    for start in range(position, len(batches), accumulate):
        yield batches[start : start + accumulate]


@dataclass(frozen=True)
class StepAgreement:
    """What every process knows before a step: its global token count, and why to stop."""

    global_tokens: float
    stop: str | None  # "interrupted", "max_minutes" or None


def agree_before_step(
    local_tokens: float, *, out_of_time: bool, interrupted: bool, context: DistributedContext
) -> StepAgreement:
    """Sum the token counts and stop flags over processes (one all-reduce on the CPU, so the
    GPU's queue is never waited on): all processes stop together, or none does."""
    counts = torch.tensor(
        [local_tokens, float(out_of_time), float(interrupted)], dtype=torch.float64
    )
    global_tokens, ranks_out_of_time, ranks_interrupted = all_reduce_sum(counts, context).tolist()
    stop = None
    if ranks_interrupted > 0:
        stop = "interrupted"
    elif ranks_out_of_time > 0:
        stop = "max_minutes"
    return StepAgreement(global_tokens, stop)


def budget_spent(state: TrainerState, config: TrainConfig) -> str | None:
    """The step or epoch budget reached, if any ("max_steps" before "epochs")."""
    if config.max_steps is not None and state.step >= config.max_steps:
        return "max_steps"
    if config.epochs is not None and state.epoch >= config.epochs:
        return "epochs"
    return None


def log_now(step: int, *, log_every: int) -> bool:
    return step % log_every == 0


def validate_now(step: int, *, epoch_ended: bool, stopping: bool, validate_every: int) -> bool:
    """Validate (and checkpoint) at each epoch end, when training stops, and every
    ``validate_every`` steps (0: only the first two)."""
    return epoch_ended or stopping or (validate_every > 0 and step % validate_every == 0)


@contextmanager
def collect_young_garbage_only() -> Iterator[None]:
    """While the loop runs, Python's garbage collector leaves alone the objects that existed
    before it (``gc.freeze``): torch's and the task's ~350,000 (modules, functions, the
    data's index lists) that every full collection would otherwise walk again, ~80 ms each
    time, about 0.5 % of a small LM's run.  What the steps create is collected as usual,
    and at the end everything returns to the collector (``gc.unfreeze``).  A process that
    froze objects itself is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
