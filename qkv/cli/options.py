"""The trainer's options, shared by every `qkv train` task."""

from __future__ import annotations

import argparse

import torch

from ..training import TrainConfig

_DEFAULTS = TrainConfig()


def add_train_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training (budgets, optimiser, checkpoints)")
    group.add_argument(
        "--epochs", type=int, default=10, help="epoch budget (default: 10; 0 = no epoch limit)"
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
        default=0,
        help="seed for initialisation, dropout and data order (default: 0)",
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out from its last checkpoint",
    )
    group.add_argument(
        "--lr",
        type=float,
        default=_DEFAULTS.lr,
        help=f"peak learning rate (default: {_DEFAULTS.lr})",
    )
    group.add_argument(
        "--schedule",
        choices=["inverse_sqrt", "cosine"],
        default=_DEFAULTS.schedule,
        help="learning-rate schedule after warm-up",
    )
    group.add_argument(
        "--warmup-steps",
        type=int,
        default=_DEFAULTS.warmup_steps,
        help=f"linear warm-up steps (default: {_DEFAULTS.warmup_steps})",
    )
    group.add_argument(
        "--label-smoothing",
        type=float,
        default=_DEFAULTS.label_smoothing,
        help=f"default: {_DEFAULTS.label_smoothing}",
    )
    group.add_argument(
        "--clip-norm",
        type=float,
        default=_DEFAULTS.clip_norm,
        help="gradient-norm clipping (0 = off)",
    )
    group.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="batches per optimizer step (gradient accumulation)",
    )
    group.add_argument(
        "--max-tokens",
        type=int,
        default=_DEFAULTS.max_tokens,
        help="tokens per batch, padding included",
    )
    group.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    group.add_argument(
        "--validate-every",
        type=int,
        default=_DEFAULTS.validate_every,
        help="steps between validations and checkpoints",
    )
    group.add_argument(
        "--patience", type=int, help="early stopping: validations without improvement"
    )
    group.add_argument(
        "--log-every", type=int, default=_DEFAULTS.log_every, help="steps between log lines"
    )
    group.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto picks a GPU when present",
    )
    group.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's choice). Use 1 when other work "
        "shares a small machine: oversubscribed cores can make steps 10-40x slower",
    )


def train_config_from(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the options describe; ``--threads`` is applied to torch here."""
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    return TrainConfig(
        lr=args.lr,
        schedule=args.schedule,
        warmup_steps=args.warmup_steps,
        label_smoothing=args.label_smoothing,
        clip_norm=args.clip_norm,
        accumulate=args.accumulate,
        bf16=args.bf16,
        max_tokens=args.max_tokens,
        epochs=args.epochs or None,
        max_steps=args.max_steps,
        max_minutes=args.max_minutes,
        validate_every=args.validate_every,
        patience=args.patience,
        seed=args.seed,
        log_every=args.log_every,
        device=args.device,
    )
