"""The trainer's options, shared by every `qkv train` task."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from ..errors import InputError
from ..training import TrainConfig, TrainResult
from ..training.config import SCHEDULES
from ..training.recipes import RECIPES, WARMUP_FRACTION, UserSchedule

_DEFAULTS = TrainConfig()


def _recipe_examples(field: str) -> str:
    return ", ".join(
        f"{family} {size}: {getattr(recipe, field):g}" for (family, size), recipe in RECIPES.items()
    )


def add_train_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training (budgets, optimiser, checkpoints)")
    group.add_argument(
        "--epochs",
        type=int,
        default=_DEFAULTS.epochs,
        help=f"epoch budget (default: {_DEFAULTS.epochs}; 0 = no epoch limit)",
    )
    group.add_argument("--max-steps", type=int, help="optimizer-step budget")
    group.add_argument(
        "--max-minutes",
        type=float,
        help="wall-clock budget; stops cleanly and keeps the best checkpoint",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=_DEFAULTS.seed,
        help=f"seed for initialisation, dropout and data order (default: {_DEFAULTS.seed})",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out from its last checkpoint",
    )
    group.add_argument(
        "--lr",
        type=float,
        help="peak learning rate (default: the recipe of the model family and size, e.g. "
        f"{_recipe_examples('lr')})",
    )
    group.add_argument(
        "--schedule",
        choices=list(SCHEDULES),
        help="learning-rate schedule after warm-up: inverse_sqrt (lr * sqrt(warm-up / step)), "
        "cosine (down to 0 at the last step) or plateau (constant, lowered when the "
        "validation loss stops improving; see --plateau-factor, --plateau-patience) "
        f"(default: {_DEFAULTS.schedule}; translation --size small-data: plateau)",
    )
    group.add_argument(
        "--min-lr",
        type=float,
        help="the lowest learning rate of the cosine and plateau schedules, at most the peak "
        f"--lr (default: {_DEFAULTS.min_lr:g}; the plateau schedule stops lowering there)",
    )
    group.add_argument(
        "--plateau-factor",
        type=float,
        default=_DEFAULTS.plateau_factor,
        help="--schedule plateau: multiply the lr by this, in (0, 1), at each plateau "
        f"(default: {_DEFAULTS.plateau_factor})",
    )
    group.add_argument(
        "--plateau-patience",
        type=int,
        default=_DEFAULTS.plateau_patience,
        help="--schedule plateau: validations without a lower validation loss before the lr "
        f"is lowered (default: {_DEFAULTS.plateau_patience}); give early stopping's "
        "--patience a larger value, or the lower rates are never tried",
    )
    group.add_argument(
        "--warmup-steps",
        type=int,
        help="linear warm-up steps (default: the recipe's, cut to "
        f"{WARMUP_FRACTION * 100:.0f}%% of the planned steps when the budget is short; for "
        "--max-minutes the steps/s are measured on a few batches first)",
    )
    group.add_argument(
        "--label-smoothing",
        type=float,
        help="epsilon of label-smoothed cross-entropy, 0 = off (default: "
        f"{_DEFAULTS.label_smoothing}, or the recipe's)",
    )
    group.add_argument(
        "--clip-norm",
        type=float,
        default=_DEFAULTS.clip_norm,
        help="gradient-norm clipping (0 = off)",
    )
    group.add_argument(
        "--weight-decay",
        type=float,
        default=_DEFAULTS.weight_decay,
        help=f"AdamW weight decay of the weight matrices (default: {_DEFAULTS.weight_decay:g})",
    )
    group.add_argument(
        "--beta2",
        type=float,
        default=_DEFAULTS.betas[1],
        help=f"AdamW's beta2 (default: {_DEFAULTS.betas[1]:g})",
    )
    group.add_argument(
        "--accumulate",
        type=int,
        default=_DEFAULTS.accumulate,
        help="batches per optimizer step (gradient accumulation)",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        help="tokens per batch, padding included (default: the recipe's, e.g. "
        f"{_recipe_examples('max_tokens')})",
    )
    group.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    group.add_argument(
        "--validate-every",
        type=int,
        default=_DEFAULTS.validate_every,
        help="steps between validations and checkpoints",
    )
    group.add_argument(
        "--eval-batches",
        type=int,
        default=_DEFAULTS.eval_batches,
        help="validate on this many validation batches, the same ones each time, and on all "
        "of them at the end (default: all every time; lm: 10)",
    )
    group.add_argument(
        "--patience", type=int, help="early stopping: validations without improvement"
    )
    group.add_argument(
        "--log-every", type=int, default=_DEFAULTS.log_every, help="steps between log lines"
    )
    group.add_argument(
        "--device",
        default=_DEFAULTS.device,
        choices=["auto", "cpu", "cuda"],
        help="auto picks a GPU when present",
    )
    group.add_argument(
        "--context-parallel",
        type=int,
        default=_DEFAULTS.context_parallel,
        help="processes sharing each training window through ring attention (train lm under "
        "torchrun; the process count must be a multiple)",
    )
    group.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's choice). Use 1 when other work "
        "shares a small machine: oversubscribed cores can make steps 10-40x slower",
    )


def train_config_from(args: argparse.Namespace, *, recipe: bool = False) -> TrainConfig:
    """The TrainConfig the options describe; ``--threads`` is applied to torch here.

    ``recipe``: the task chooses the learning rate later where ``--lr`` is not given (and
    checks ``--min-lr`` against it then), so the default lr here only holds a place."""
    if args.threads is not None:
        if args.threads < 1:
            raise InputError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    min_lr = _DEFAULTS.min_lr if args.min_lr is None else args.min_lr
    lr = _DEFAULTS.lr if args.lr is None else args.lr
    if recipe and args.lr is None:
        lr = max(lr, min_lr)
    values = dict(
        lr=lr,
        min_lr=min_lr,
        schedule=_DEFAULTS.schedule if args.schedule is None else args.schedule,
        plateau_factor=args.plateau_factor,
        plateau_patience=args.plateau_patience,
        warmup_steps=_DEFAULTS.warmup_steps if args.warmup_steps is None else args.warmup_steps,
        label_smoothing=(
            _DEFAULTS.label_smoothing if args.label_smoothing is None else args.label_smoothing
        ),
        clip_norm=args.clip_norm,
        weight_decay=args.weight_decay,
        betas=(_DEFAULTS.betas[0], args.beta2),
        accumulate=args.accumulate,
        bf16=args.bf16,
        max_tokens=_DEFAULTS.max_tokens if args.max_tokens is None else args.max_tokens,
        epochs=args.epochs or None,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        validate_every=args.validate_every,
        eval_batches=args.eval_batches,
        patience=args.patience,
        seed=args.seed,
        log_every=args.log_every,
        device=args.device,
        context_parallel=args.context_parallel,
    )
    try:
        return TrainConfig(**values)
    except ValueError as error:  # TrainConfig checks every value and names the bad one
        if isinstance(error, InputError):
            raise
        raise InputError(f"training options: {error}") from error


def user_schedule_from(args: argparse.Namespace) -> UserSchedule:
    """The learning rate, warm-up, batch tokens, schedule and label smoothing the user gave
    (None: the recipe's)."""
    return UserSchedule(
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        max_tokens=args.max_tokens,
        schedule=args.schedule,
        label_smoothing=args.label_smoothing,
    )


def run_training(train: Callable[..., TrainResult], setup: object, args: argparse.Namespace) -> int:
    """Call a task's training function with the options, and end with the two lines every
    `qkv train` prints: what the run did, and where it is."""
    result = train(
        setup,
        train_config_from(args, recipe=True),
        args.out,
        resume=args.resume,
        schedule=user_schedule_from(args),
        say=print,
    )
    best = ""
    if result.best_metric:
        best = f", best {result.best_metric} {result.best_value:.4g} at step {result.best_step}"
    print(
        f"done: {result.steps} steps, {result.epochs} epochs, {result.elapsed:.0f} s, "
        f"stopped by {result.stop_reason}{best}"
    )
    print(f"checkpoint: {args.out}")
    return 0
