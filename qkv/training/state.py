"""What a run reads (the data and sampler protocols), remembers (to resume as if it had
never stopped) and returns, and the checks made before resuming."""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from ..data.batch import Batch
from ..data.batching import TokenBatchSampler
from ..errors import RunError
from ..models.saved_configs import upgrade_saved_config
from .checkpoint import read_pointer
from .config import RESUME_MAY_CHANGE, TrainConfig, upgrade_train_config

__all__ = [
    "TrainingData",
    "BatchSampler",
    "TrainerState",
    "TrainResult",
    "default_batches",
    "total_steps",
    "seed_everything",
    "capture_rng",
    "restore_rng",
    "data_fingerprint",
    "check_resumable",
]


@runtime_checkable
class TrainingData(Protocol):
    """What the trainer needs of a dataset: its size, lengths (for batching) and collation."""

    source_lengths: list[int]
    target_lengths: list[int]

    def __len__(self) -> int: ...

    def collate(self, indices: list[int]) -> Batch:
        """The batch made of the examples at ``indices``."""


@runtime_checkable
class BatchSampler(Protocol):
    """This rank's batches (lists of example indices) of an epoch; deterministic in
    ``epoch``, and the same number of batches on every rank."""

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of example indices of ``epoch``, in training order."""


@dataclass
class TrainerState:
    """Progress of a run.  ``step`` counts optimizer updates; ``position`` counts the batches of
    epoch ``epoch`` already consumed; ``bad_validations`` counts validations since the best;
    ``schedule_steps`` is the learning-rate schedule's length, fixed when the run starts;
    ``window_*`` is the log window in progress (summed loss and tokens over all processes,
    training seconds), so that a resumed run logs the same averages as an uninterrupted one."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    elapsed: float = 0.0
    best_metric: str | None = None
    best_value: float | None = None
    best_step: int | None = None
    bad_validations: int = 0
    last_saved_step: int = -1
    schedule_steps: int | None = None
    window_loss: float = 0.0
    window_tokens: float = 0.0
    window_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainerState:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})


@dataclass
class TrainResult:
    """How a run ended.  ``stop_reason``: "epochs", "max_steps", "max_minutes" or
    "early_stopping".  ``epochs`` counts completed epochs; ``elapsed`` is in seconds,
    summed over resumed runs; ``train_loss`` is the mean token loss (label-smoothed, as
    trained) of the steps since the previous log line; ``valid`` the last validation's
    metrics; the checkpoint paths are directories (``best_checkpoint`` None without valid_data)."""

    steps: int
    epochs: int
    stop_reason: str
    elapsed: float
    train_loss: float | None
    valid: dict[str, float] = field(default_factory=dict)
    best_metric: str | None = None
    best_value: float | None = None
    best_step: int | None = None
    last_checkpoint: Path | None = None
    best_checkpoint: Path | None = None

    @classmethod
    def of(
        cls,
        state: TrainerState,
        stop_reason: str,
        elapsed: float,
        train_loss: float | None,
        valid: dict[str, float],
        out_dir: Path,
    ) -> TrainResult:
        """The result of a run that ended in ``state`` for ``stop_reason``."""
        return cls(
            steps=state.step,
            epochs=state.epoch,
            stop_reason=stop_reason,
            elapsed=elapsed,
            train_loss=train_loss,
            valid=valid,
            best_metric=state.best_metric,
            best_value=state.best_value,
            best_step=state.best_step,
            last_checkpoint=read_pointer(out_dir, "last"),
            best_checkpoint=read_pointer(out_dir, "best"),
        )


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (every device).  Call before building the model so that
    the same command gives the same initial weights."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng(device: torch.device) -> dict[str, Any]:
    """This process's RNG states, as plain lists and tensors (safe for ``weights_only`` load)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def data_fingerprint(data: TrainingData) -> str:
    """A short hash of a dataset's size and lengths: cheap, and it changes with the data."""
    digest = hashlib.sha256()
    digest.update(str(len(data)).encode())
    for lengths in (data.source_lengths, data.target_lengths):
        digest.update(np.asarray(lengths, dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


def check_resumable(
    saved: dict[str, Any],
    *,
    model_type: str,
    model_config: dict[str, Any],
    train_config: TrainConfig,
    fingerprint: str,
    world_size: int,
    directory: Any,
) -> None:
    """Refuse, in one line naming the differences, to resume a run with another model,
    other data, other optimisation settings or another number of processes."""
    differences = []
    if saved["model_type"] != model_type:
        differences.append(f"model_type {saved['model_type']!r} -> {model_type!r}")
    # a config written before one of its defaults changed, or its fields moved, reads as the
    # model that was built then (as load_checkpoint reads it)
    saved_model = upgrade_saved_config(saved["model_type"], saved["model_config"], {})
    differences += _differing("model", saved_model, model_config)
    current = train_config.to_dict()
    # a field newer than the checkpoint was trained at its default (e.g. eval_batches), and
    # the plateau's knobs of a checkpoint older than schedule_options move there
    saved_config = upgrade_train_config({**TrainConfig().to_dict(), **saved["train_config"]})
    old = {k: v for k, v in saved_config.items() if k not in RESUME_MAY_CHANGE}
    new = {k: v for k, v in current.items() if k not in RESUME_MAY_CHANGE}
    differences += _differing("train", old, new)
    if saved["data_fingerprint"] != fingerprint:
        differences.append("training data (its size or example lengths changed)")
    if saved["world_size"] != world_size:
        differences.append(f"world_size {saved['world_size']} -> {world_size}")
    if differences:
        raise RunError(
            f"cannot resume from {directory}: it was trained with a different "
            + "; ".join(differences)
            + " (start a new out_dir, or resume with the original settings)"
        )


def _differing(prefix: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        before, after = _plain(old.get(key)), _plain(new.get(key))
        if before != after:
            out.append(f"{prefix}.{key} {before!r} -> {after!r}")
    return out


def _plain(value: Any) -> Any:
    """Tuples and lists compare equal (JSON round-trips turn one into the other)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def default_batches(
    data: TrainingData, config: TrainConfig, rank: int, world_size: int, *, shuffle: bool = True
) -> BatchSampler:
    """A ``TokenBatchSampler`` over ``data`` (batching by the longer of source and target)."""
    lengths = [max(s, t) for s, t in zip(data.source_lengths, data.target_lengths, strict=True)]
    return TokenBatchSampler(
        lengths,
        max_tokens=config.max_tokens,
        shuffle=shuffle,
        seed=config.seed,
        rank=rank,
        world_size=world_size,
    )


def total_steps(config: TrainConfig, updates_per_epoch: int) -> int | None:
    """The number of steps the budgets allow, when known (max_minutes alone: None)."""
    budgets = [config.max_steps]
    if config.epochs is not None:
        budgets.append(config.epochs * updates_per_epoch)
    known = [b for b in budgets if b is not None]
    return min(known) if known else None
