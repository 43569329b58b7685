"""TrainConfig: every knob of the shared trainer, validated when it is made."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .schedules import available_schedules, schedule_kind, schedule_option

__all__ = ["TrainConfig", "OPTIMIZERS", "SCHEDULES", "RESUME_MAY_CHANGE", "upgrade_train_config"]

SCHEDULES = available_schedules()  # the registry of qkv.training.schedules
DEVICES = ("auto", "cpu", "cuda")
#: TrainConfig.optimizer's choices (see :func:`qkv.training.optimizer.make_optimizer`).
OPTIMIZERS = ("adamw", "muon")

#: Fields a resumed run may change: budgets and bookkeeping.  Every other field shapes the
#: optimisation itself, so resuming with a different value is refused.
RESUME_MAY_CHANGE = frozenset(
    {
        "epochs",
        "max_steps",
        "max_minutes",
        "validate_every",
        "eval_batches",
        "patience",
        "log_every",
        "device",
    }
)


@dataclass(frozen=True)
class TrainConfig:
    """How to train.  A *step* is one optimizer update (``accumulate`` batches per rank).

    lr: peak learning rate, reached at the end of warm-up.
    schedule: "inverse_sqrt" (Vaswani et al. 2017: linear warm-up then lr * sqrt(warmup/step)),
        "cosine" (linear warm-up then half a cosine down to ``min_lr`` at the last step the
        budgets allow; with ``max_minutes``, the steps the clock allows at the speed of the
        run's first steps, fixed once at the end of warm-up) or
        "plateau" (linear warm-up then constant, multiplied by ``plateau_factor`` each time
        the validation loss has not improved for ``plateau_patience`` validations, as the
        low-resource recipes do; needs validation data).  The plateau schedule watches the
        validation loss even when BLEU picks the best checkpoint.
    warmup_steps: steps of linear warm-up (0 = none).
    min_lr: the floor of the cosine and plateau schedules.
    schedule_options: the knobs only one schedule reads, by name (its
        :class:`~qkv.training.schedules.ScheduleKind`'s ``options``, each checked by it); the
        chosen schedule's options not given take their defaults here.  The plateau's:
        ``plateau_factor``, its decay in (0, 1) (default 0.5), and ``plateau_patience``,
        validations without improvement before it decays (>= 1, default 2).  With early
        stopping, set ``patience`` larger (say 2-3 decays' worth), or training stops before
        the lower lr has been tried; nothing enforces it.  An option of another schedule is
        kept, unread, so that a recipe that picks that schedule later finds it.
    optimizer: "adamw", or "muon": Muon's orthogonalised updates for the hidden layers'
        weight matrices and AdamW for embeddings, the output layer, biases and norms (as
        nanochat and modded-nanogpt train), one lr and one weight decay for both.
    weight_decay: AdamW decoupled weight decay, applied to matrices (not biases or norms).
    betas: AdamW's (beta1, beta2).
    label_smoothing: epsilon of label-smoothed cross-entropy (0 = plain cross-entropy).
    clip_norm: clip the global gradient norm to this (0 = no clipping).
    accumulate: batches whose gradients are summed into one step.
    bf16: run forward passes under bfloat16 autocast.
    max_tokens: the token budget of one batch (given to the batch sampler).
    epochs / max_steps / max_minutes: budgets; training stops at the first one reached
        (None = unlimited, but at least one must be set).
    validate_every: validate and checkpoint every this many steps (0 = only at epoch ends),
        and always at each epoch end and when training stops.
    eval_batches: validate on this many of the validation data's batches, spread evenly over
        them and the same ones at every validation (nanoGPT's ``eval_iters``), so that a
        validation costs a fixed, small share of a run and the curve compares like with like;
        the run's last validation also scores all of them (``valid_loss_full``).  0 = all of
        them at every validation.
    patience: stop after this many validations without improvement (None = never).  The
        metric is "bleu" (higher is better) when the evaluate callback returns one, else the
        validation loss (lower is better).
    seed: seeds model initialisation (see ``seed_everything``), dropout and data order.
    log_every: log training loss, lr and throughput every this many steps.
    device: "auto" (cuda when available), "cpu" or "cuda".
    context_parallel: processes that share each training window (ring attention, for a
        model with ``context_parallel(group)``); the world size must be a multiple of it,
        and world / context_parallel groups train on different batches (data parallel).
    """

    lr: float = 5e-4
    schedule: str = "inverse_sqrt"
    warmup_steps: int = 4000
    min_lr: float = 0.0
    schedule_options: Mapping[str, Any] = field(default_factory=dict)
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    accumulate: int = 1
    bf16: bool = False
    max_tokens: int = 4096
    epochs: int | None = 10
    max_steps: int | None = None
    max_minutes: float | None = None
    validate_every: int = 1000
    eval_batches: int = 0
    patience: int | None = None
    seed: int = 0
    log_every: int = 100
    device: str = "auto"
    context_parallel: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            object.__setattr__(self, "betas", tuple(self.betas))
        _check_positive_finite("lr", self.lr)
        schedule = schedule_kind(self.schedule)  # ValueError naming the choices
        _check_int("warmup_steps", self.warmup_steps, minimum=0)
        if not 0.0 <= self.min_lr <= self.lr:
            raise ValueError(f"min_lr={self.min_lr} must lie in [0, lr={self.lr}]")
        for name, value in self.schedule_options.items():
            schedule_option(name).check(value)  # ValueError naming the option or the value
        defaults = {name: option.default for name, option in schedule.options.items()}
        object.__setattr__(self, "schedule_options", {**defaults, **self.schedule_options})
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r} is unknown; use one of {OPTIMIZERS}")
        if not 0.0 <= self.weight_decay < 1.0:
            raise ValueError(f"weight_decay={self.weight_decay} must lie in [0, 1)")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas={self.betas} must be two numbers in [0, 1)")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.label_smoothing} must lie in [0, 1)")
        if not (self.clip_norm >= 0.0 and math.isfinite(self.clip_norm)):
            raise ValueError(f"clip_norm={self.clip_norm} must be >= 0 (0 turns clipping off)")
        _check_int("accumulate", self.accumulate, minimum=1)
        _check_int("max_tokens", self.max_tokens, minimum=1)
        if self.epochs is not None:
            _check_int("epochs", self.epochs, minimum=1)
        if self.max_steps is not None:
            _check_int("max_steps", self.max_steps, minimum=1)
        if self.max_minutes is not None:
            _check_positive_finite("max_minutes", self.max_minutes)
        if self.epochs is None and self.max_steps is None and self.max_minutes is None:
            raise ValueError("set at least one budget: epochs, max_steps or max_minutes")
        clock = schedule.fits_clock and self.max_minutes is not None
        if schedule.needs_length and self.epochs is None and self.max_steps is None and not clock:
            raise ValueError(
                f"schedule={self.schedule!r} needs a known length: set max_steps or epochs"
                + (" (or max_minutes)" if schedule.fits_clock else "")
            )
        _check_int("validate_every", self.validate_every, minimum=0)
        _check_int("eval_batches", self.eval_batches, minimum=0)
        if self.patience is not None:
            _check_int("patience", self.patience, minimum=1)
        _check_int("seed", self.seed, minimum=0)
        _check_int("log_every", self.log_every, minimum=1)
        _check_int("context_parallel", self.context_parallel, minimum=1)
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r} is unknown; use one of {DEVICES}")

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain dict (for a checkpoint's JSON metadata)."""
        return dataclasses.asdict(self)


def upgrade_train_config(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved TrainConfig dict in today's fields: before ``schedule_options``
    the plateau's two knobs were fields of their own for every schedule; they move there
    where the saved schedule reads them or they differ from their default."""
    saved = dict(saved)
    options = dict(saved.get("schedule_options") or {})
    reads = schedule_kind(saved.get("schedule", TrainConfig.schedule)).options
    for name in ("plateau_factor", "plateau_patience"):
        if name in saved:
            value = saved.pop(name)
            if name in reads or value != schedule_option(name).default:
                options.setdefault(name, value)
    saved["schedule_options"] = options
    return saved


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an int")
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")


def _check_positive_finite(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a positive finite number")
