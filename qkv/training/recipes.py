"""Learning rate and warm-up that fit the run: a small table per model family and size, and
the rule that shortens the warm-up when the budget is short.

Why: the paper's schedule (peak 5e-4 after 4,000 warm-up steps, for WMT on 8 GPUs) never
leaves warm-up in a CPU run of a few hundred steps, and such a run learns nothing.  So:

- each family and size has a peak learning rate and a full warm-up (a :class:`Recipe`, in
  ``qkv.tasks.presets``);
- when the run's planned steps are known or can be estimated, the warm-up is at most
  :data:`WARMUP_FRACTION` of them (the peak is reached early, whatever the budget);
- planned steps = the smallest budget: ``max_steps``, ``epochs`` x updates per epoch, and
  for ``max_minutes`` the minutes x a steps/s measured on a few real batches before the run;
- a recipe may also name the schedule after warm-up and the label smoothing (the
  ``small-data`` sizes: the plateau schedule, smoothing 0.1); otherwise they are the
  trainer's (inverse square root, 0.1);
- a value the user gave (``lr``, ``warmup_steps``, ``max_tokens``, ``schedule``,
  ``label_smoothing``) always wins.

Neither the inverse square root nor the plateau schedule needs a step count, so an estimate
that is off only moves where the warm-up ends.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.batch import Batch
from ..errors import InputError
from .checkpoint import load_trainer_state, read_pointer
from .config import TrainConfig
from .loss import sequence_loss

__all__ = [
    "Recipe",
    "WARMUP_FRACTION",
    "ChosenSchedule",
    "choose_schedule",
    "planned_steps",
    "measure_steps_per_second",
    "UserSchedule",
    "fit_train_config",
    "resumed_schedule",
]

#: The warm-up is at most this fraction of the planned steps.  After warm-up the inverse
#: square root schedule decays from the peak as sqrt(warm-up / step), so a warm-up too
#: short for the run decays early: on `dates` for 5 minutes (loaded machine), the RNN with
#: Luong's score reached 98 % valid exact match with 60 warm-up steps of 346 and 88 % with
#: 18 of 232; a fifth of the run keeps the rate within about half of its peak.
WARMUP_FRACTION = 0.2


@dataclass(frozen=True)
class Recipe:
    """Peak learning rate, the warm-up of a long run, and the tokens per batch, for one
    family and size.  Small models take small batches: on a CPU, more updates of a
    quarter of the tokens learn the small tasks faster than fewer large ones.
    ``schedule`` / ``label_smoothing``: None leaves the trainer's (TrainConfig's)."""

    lr: float
    warmup_steps: int
    max_tokens: int
    schedule: str | None = None
    label_smoothing: float | None = None


@dataclass(frozen=True)
class UserSchedule:
    """The learning rate, warm-up, batch tokens, schedule and label smoothing a user gave
    (None: the recipe chooses)."""

    lr: float | None = None
    warmup_steps: int | None = None
    max_tokens: int | None = None
    schedule: str | None = None
    label_smoothing: float | None = None


@dataclass(frozen=True)
class ChosenSchedule:
    """The peak learning rate, warm-up and batch a run uses, and why (for its metadata);
    ``schedule`` / ``label_smoothing`` None: the run's TrainConfig keeps its own."""

    lr: float
    warmup_steps: int
    max_tokens: int
    reason: str
    schedule: str | None = None
    label_smoothing: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        after = "" if self.schedule is None else f", {self.schedule} schedule"
        if self.label_smoothing is not None:
            after += f", label smoothing {self.label_smoothing:g}"
        return (
            f"schedule: peak lr {self.lr:g}, {self.warmup_steps} warm-up steps, batches of "
            f"{self.max_tokens} tokens{after} ({self.reason})"
        )


def planned_steps(
    config: TrainConfig,
    *,
    updates_per_epoch: int | None,
    steps_per_second: float | None = None,
) -> int | None:
    """The steps the run's budgets allow: the smallest of ``max_steps``, ``epochs`` x
    ``updates_per_epoch`` and ``max_minutes`` x ``steps_per_second`` (None: unknown; a
    budget whose factor is None is left out)."""
    budgets = []
    if config.max_steps is not None:
        budgets.append(config.max_steps)
    if config.epochs is not None and updates_per_epoch is not None:
        budgets.append(config.epochs * updates_per_epoch)
    if config.max_minutes is not None and steps_per_second is not None:
        budgets.append(math.floor(config.max_minutes * 60 * steps_per_second))
    return max(min(budgets), 1) if budgets else None


def choose_schedule(recipe: Recipe, user: UserSchedule, *, planned: int | None) -> ChosenSchedule:
    """The rule: the recipe's peak, batch, warm-up, schedule and label smoothing, the warm-up
    cut to ``WARMUP_FRACTION`` of ``planned`` steps when that is shorter; what the user gave
    wins."""
    lr = recipe.lr if user.lr is None else user.lr
    max_tokens = recipe.max_tokens if user.max_tokens is None else user.max_tokens
    why = [f"lr {'recipe' if user.lr is None else 'given'}"]
    if user.warmup_steps is not None:
        warmup, why = user.warmup_steps, [*why, "warm-up given"]
    elif planned is not None and math.ceil(WARMUP_FRACTION * planned) < recipe.warmup_steps:
        warmup = math.ceil(WARMUP_FRACTION * planned)
        why.append(f"warm-up {WARMUP_FRACTION:.0%} of ~{planned} planned steps")
    else:
        warmup, why = recipe.warmup_steps, [*why, "warm-up recipe"]
    schedule = recipe.schedule if user.schedule is None else user.schedule
    smoothing = recipe.label_smoothing if user.label_smoothing is None else user.label_smoothing
    return ChosenSchedule(lr, warmup, max_tokens, ", ".join(why), schedule, smoothing)


def measure_steps_per_second(
    model: nn.Module, batch: Batch, *, repeats: int = 4, accumulate: int = 1
) -> float:
    """Training steps per second of ``model`` on ``batch``: forward, loss and backward on
    the model's device, one untimed pass and then the fastest of ``repeats`` timed ones.

    The fastest, because on a shared machine the slow passes are other jobs' doing (and
    a run's first seconds, when it is timed, are the busiest); an estimate too high only
    keeps the warm-up nearer the recipe's.  The weights are left as they were: gradients
    are cleared and no optimizer step is taken; the random state (dropout) is restored."""
    was_training = model.training
    model.train()
    fastest = math.inf
    with torch.random.fork_rng():
        for index in range(repeats + 1):
            started = time.perf_counter()
            output = model(batch.source, batch.target_input)
            loss, _ = sequence_loss(output.logits, batch.target_output, pad_id=batch.pad_id)
            loss.backward()
            if index > 0:
                fastest = min(fastest, time.perf_counter() - started)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    # the optimizer update, validation and bookkeeping: about a fifth more than the passes
    return 1.0 / (1.2 * max(fastest, 1e-9) * accumulate)


def fit_train_config(
    config: TrainConfig,
    recipe: Recipe,
    user: UserSchedule,
    *,
    model: nn.Module,
    sample: Callable[[TrainConfig], tuple[Batch, int | None]],
) -> tuple[TrainConfig, ChosenSchedule]:
    """``config`` with the learning rate, warm-up and batch tokens the rule chooses.

    ``sample(config)`` gives a typical training batch under ``config`` and the updates per
    epoch (None: unknown, ``epochs`` is then left out of the planned steps).  The batch is
    timed only when the clock (``max_minutes``) is a budget, no warm-up is given and the run
    is on the CPU (where the model is now; a GPU run keeps the recipe's warm-up)."""
    batched = dataclasses.replace(
        config, max_tokens=recipe.max_tokens if user.max_tokens is None else user.max_tokens
    )
    batch, updates_per_epoch = sample(batched)
    speed = None
    if user.warmup_steps is None and config.max_minutes is not None and not _on_gpu(config):
        speed = measure_steps_per_second(model, batch, accumulate=config.accumulate)
    planned = planned_steps(batched, updates_per_epoch=updates_per_epoch, steps_per_second=speed)
    chosen = choose_schedule(recipe, user, planned=planned)
    if speed is not None:
        chosen = dataclasses.replace(
            chosen, reason=f"{chosen.reason}; {speed:.2f} steps/s measured"
        )
    if config.min_lr > chosen.lr:
        raise InputError(
            f"min_lr={config.min_lr:g} is above the peak learning rate {chosen.lr:g}; "
            "give a lower min_lr, or a higher lr",
            fields=("min_lr", "lr"),
        )
    fitted = dataclasses.replace(
        batched,
        lr=chosen.lr,
        warmup_steps=chosen.warmup_steps,
        max_tokens=chosen.max_tokens,
        schedule=chosen.schedule or config.schedule,
        label_smoothing=(
            config.label_smoothing if chosen.label_smoothing is None else chosen.label_smoothing
        ),
    )
    chosen = dataclasses.replace(
        chosen, schedule=fitted.schedule, label_smoothing=fitted.label_smoothing
    )
    return fitted, chosen


def resumed_schedule(out_dir: str | Path, user: UserSchedule) -> UserSchedule:
    """A resumed run keeps the learning rate, warm-up, batch tokens, schedule and label
    smoothing it started with (the trainer refuses to resume with others) where the user
    does not give them again."""
    last = read_pointer(out_dir, "last")
    if last is None:
        return user  # nothing to resume: the task says so in its own words
    saved = load_trainer_state(last)["train_config"]
    kept = {name: saved[name] for name in ("lr", "warmup_steps", "max_tokens")}
    kept |= {name: saved[name] for name in ("schedule", "label_smoothing") if name in saved}
    given = {name: value for name, value in dataclasses.asdict(user).items() if value is not None}
    return UserSchedule(**{**kept, **given})


def _on_gpu(config: TrainConfig) -> bool:
    return config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
