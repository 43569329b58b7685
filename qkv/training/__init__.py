"""Training shared by every qkv model: the loop, schedules, loss, checkpoints, resume, DDP."""

from .checkpoint import (
    Checkpoint,
    checkpoint_model_type,
    load_checkpoint,
    read_pointer,
    resolve_checkpoint,
    save_checkpoint,
)
from .config import TrainConfig
from .distributed import DistributedContext, setup_distributed
from .loss import sequence_loss
from .schedules import build_schedule, cosine_schedule, inverse_sqrt_schedule
from .signals import TrainingInterrupted
from .state import BatchSampler, TrainingData, seed_everything
from .trainer import Trainer, TrainResult, train

__all__ = [
    "TrainConfig",
    "Trainer",
    "TrainResult",
    "train",
    "TrainingInterrupted",
    "sequence_loss",
    "build_schedule",
    "inverse_sqrt_schedule",
    "cosine_schedule",
    "Checkpoint",
    "load_checkpoint",
    "checkpoint_model_type",
    "save_checkpoint",
    "read_pointer",
    "resolve_checkpoint",
    "seed_everything",
    "TrainingData",
    "BatchSampler",
    "DistributedContext",
    "setup_distributed",
]
