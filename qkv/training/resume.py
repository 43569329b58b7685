"""Saving a run so that it can resume, and resuming it exactly where it stopped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..models.registry import config_to_dict, model_type_of
from .checkpoint import load_trainer_state, load_weights, read_pointer, save_checkpoint
from .config import TrainConfig
from .distributed import DistributedContext, all_gather_object, barrier
from .state import TrainerState, capture_rng, check_resumable

__all__ = ["find_resume_point", "restore_run", "save_run"]


def find_resume_point(out_dir: Path, *, resume: bool, context: DistributedContext) -> Path | None:
    """The checkpoint to resume (``last.json``'s), None for a fresh run; refuses to resume
    nothing, and refuses to start afresh over an existing run."""
    if context.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    barrier(context)
    last = read_pointer(out_dir, "last")
    if resume and last is None:
        raise ValueError(
            f"resume=True but {out_dir} has no checkpoint (no last.json); "
            "train without resume first"
        )
    if not resume and last is not None:
        raise ValueError(
            f"{out_dir} already holds a run (last.json names {last}); pass resume=True "
            "to continue it, or choose a new out_dir"
        )
    return last


def restore_run(
    directory: Path,
    *,
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: TrainConfig,
    fingerprint: str,
    context: DistributedContext,
) -> tuple[TrainerState, list[dict[str, Any]]]:
    """Load weights, optimizer and schedule from ``directory`` after checking the run is the
    same one; returns the progress and every rank's saved RNG states."""
    saved = load_trainer_state(directory)  # on the CPU; the optimizer moves its state
    check_resumable(
        saved,
        model_type=model_type_of(model),
        model_config=config_to_dict(model.config),
        train_config=config,
        fingerprint=fingerprint,
        world_size=context.world_size,
        directory=directory,
    )
    load_weights(model, directory, map_location=context.device)
    optimizer.load_state_dict(saved["optimizer"])
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
