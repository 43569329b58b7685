"""AdamW with decoupled weight decay on the weight matrices only."""

from __future__ import annotations

import torch
from torch import nn

from .config import TrainConfig

__all__ = ["make_optimizer"]


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW over ``model``'s trainable parameters.  Weight decay applies to tensors of two or
    more dimensions (linear and embedding weights), not to biases and norm gains, whose
    shrinking towards zero is not a useful prior."""
    matrices, vectors = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (matrices if parameter.dim() >= 2 else vectors).append(parameter)
    if not matrices and not vectors:
        raise ValueError(f"{type(model).__name__} has no trainable parameters")
    groups = [
        {"params": matrices, "weight_decay": config.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)
