"""Saving a run so that it can resume, and resuming it exactly where it stopped."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..errors import CheckpointError, RunError
from ..models.registry import config_to_dict, model_type_of
from .checkpoint import load_trainer_state, load_weights, read_pointer, save_checkpoint
from .clock_fit import on_the_clock
from .config import TrainConfig
from .distributed import DistributedContext, all_gather_object, barrier
from .optimizer import make_optimizer
from .schedules import build_schedule
from .state import TrainerState, capture_rng, check_resumable, restore_rng, seed_everything
from .weights import WeightsMismatchError

__all__ = ["start_or_resume", "find_resume_point", "restore_run", "save_run", "schedule_length"]


def start_or_resume(
    model: nn.Module,
    config: TrainConfig,
    *,
    out_dir: Path,
    resume: bool,
    total_steps: int | None,
    fingerprint: str,
    context: DistributedContext,
) -> tuple[TrainerState, Optimizer, LRScheduler, bool]:
    """The optimizer, schedule, progress and random state a run starts from: fresh (and
    seeded), or exactly those its last checkpoint saved.  The last item: whether it resumed."""
    resume_from = find_resume_point(out_dir, resume=resume, context=context)
    saved = load_trainer_state(resume_from) if resume_from is not None else None
    length = schedule_length(config, total_steps, saved)
    optimizer = make_optimizer(model, config)
    scheduler = build_schedule(
        config.schedule,
        optimizer,
        warmup_steps=config.warmup_steps,
        total_steps=length,
        floor=config.min_lr / config.lr,
        **config.schedule_options,
    )
    if saved is None:
        seed_everything(config.seed + context.rank)  # dropout differs across ranks
        return TrainerState(schedule_steps=length), optimizer, scheduler, False
    state, rng = restore_run(
        resume_from,
        saved,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        config=config,
        fingerprint=fingerprint,
        context=context,
    )
    state.schedule_steps = length
    restore_rng(rng[context.rank], context.device)
    return state, optimizer, scheduler, True


def find_resume_point(out_dir: Path, *, resume: bool, context: DistributedContext) -> Path | None:
    """The checkpoint to resume (``last.json``'s), None for a fresh run; refuses to resume
    nothing, and refuses to start afresh over an existing run."""
    if context.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    barrier(context)
    last = read_pointer(out_dir, "last")
    if resume and last is None:
        raise RunError(
            f"resume=True but {out_dir} has no checkpoint (no last.json); "
            "train without resume first"
        )
    if not resume and last is not None:
        raise RunError(
            f"{out_dir} already holds a run (last.json names {last}); pass resume=True "
            "to continue it, or choose a new out_dir"
        )
    return last


def restore_run(
    directory: Path,
    saved: dict[str, Any],
    *,
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: TrainConfig,
    fingerprint: str,
    context: DistributedContext,
) -> tuple[TrainerState, list[dict[str, Any]]]:
    """Load weights, optimizer and schedule from ``directory`` (whose trainer state is
    ``saved``, see ``load_trainer_state``) after checking the run is the same one; returns
    the progress and every rank's saved RNG states."""
    check_resumable(
        saved,
        model_type=model_type_of(model),
        model_config=config_to_dict(model.config),
        train_config=config,
        fingerprint=fingerprint,
        world_size=context.world_size,
        directory=directory,
    )
    try:
        load_weights(model, directory, map_location=context.device)
    except WeightsMismatchError as error:
        raise CheckpointError(
            f"{error}; the run's settings are the same, so it was probably saved by an older "
            "qkv that built this model differently: resume it with that version, or start a "
            "new run (its checkpoints still load for evaluation)"
        ) from None
    try:
        optimizer.load_state_dict(saved["optimizer"])
    except ValueError as error:  # torch: parameter groups of another size
        raise CheckpointError(
            f"the optimizer state in {directory} does not fit this model's parameters ({error}); "
            "a run saved by a qkv before attention stacked W_Q, W_K, W_V in one matrix "
            "resumes only with that version: finish it there, or start a new run (its "
            "weights still load for evaluation and generation)"
        ) from None
    scheduler.load_state_dict(saved["scheduler"])
    return TrainerState.from_dict(saved["state"]), saved["rng"]


def save_run(
    out_dir: Path,
    *,
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: TrainConfig,
    fingerprint: str,
    state: TrainerState,
    context: DistributedContext,
    metadata: Mapping[str, Any],
    tokenizers: Mapping[str, Any],
    improved: bool,
) -> None:
    """Checkpoint the run (every rank calls this; rank 0 writes, the others wait)."""
    rng = all_gather_object(capture_rng(context.device), context)
    if context.is_main:
        trainer_state = {
            "state": state.to_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng,
            "train_config": config.to_dict(),
            "model_type": model_type_of(model),
            "model_config": config_to_dict(model.config),
            "data_fingerprint": fingerprint,
            "world_size": context.world_size,
        }
        best = {"metric": state.best_metric, "value": state.best_value} if improved else None
        save_checkpoint(
            out_dir,
            model,
            step=state.step,
            metadata=metadata,
            tokenizers=tokenizers,
            trainer_state=trainer_state,
            best=best,
        )
    barrier(context)


def schedule_length(
    config: TrainConfig, total_steps: int | None, saved: dict[str, Any] | None
) -> int | None:
    """The learning-rate schedule's length: the budget's ``total_steps`` for a new run, the
    length it started with for a resumed one, whatever its budgets are now (so the resumed
    run's learning rates are the uninterrupted run's, step for step)."""
    length = None if saved is None else saved["state"].get("schedule_steps")
    if length is None:  # a new run (or a checkpoint written before lengths were saved)
        return total_steps  # on the clock, the trainer may shorten it (clock_fit)
    if (
        config.schedule == "cosine"
        and not on_the_clock(config)
        and (total_steps or math.inf) > length
    ):
        warnings.warn(
            f"the cosine schedule of this run ends at step {length} (fixed when it started); "
            f"the steps after it train at min_lr={config.min_lr}",
            stacklevel=3,
        )
    return length
