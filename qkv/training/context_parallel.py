"""Context parallelism in training: which processes share a window, which batches they read.

With ``TrainConfig.context_parallel = P`` the W processes form W / P groups of P
consecutive ranks.  The ranks of a group read the same batches (data-parallel rank
``rank // P`` of ``W // P``) and each holds its zigzag part of every window
(``model.context_parallel(group)``, ring attention over the group).  DDP still averages
the gradients over all W processes; each counts 1/P of its window's tokens, so the step's
objective stays  sum of token losses / number of tokens  over the distinct windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist
from torch import nn

from ..errors import InputError
from . import distributed
from .distributed import DistributedContext

__all__ = ["ContextParallelPlan", "plan_context_parallel", "check_context_parallel_model"]


@dataclass(frozen=True)
class ContextParallelPlan:
    """size: P; data_rank / data_world: this process's place among the groups; group: its
    ring's process group (None when P = 1)."""

    size: int
    data_rank: int
    data_world: int
    group: Any = None

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module a training step runs: the model itself, or its context-parallel form."""
        if self.size == 1:
            return model
        return model.context_parallel(self.group)


def plan_context_parallel(size: int, context: DistributedContext) -> ContextParallelPlan:
    """The groups of ``size`` consecutive ranks; every rank creates every group (as
    ``torch.distributed.new_group`` requires) and keeps its own."""
    world, rank = context.world_size, context.rank
    if size == 1:
        return ContextParallelPlan(1, rank, world)
    if world % size:
        raise InputError(
            f"context_parallel={size} needs a number of processes that is a multiple of "
            f"{size}, got {world}; launch with torchrun --nproc_per_node={size} (or a multiple)",
            fields=("context_parallel",),
        )
    own = None
    for first in range(0, world, size):
        group = dist.new_group(
            list(range(first, first + size)), timeout=distributed.PROCESS_GROUP_TIMEOUT
        )
        if first <= rank < first + size:
            own = group
    return ContextParallelPlan(size, rank // size, world // size, own)


def check_context_parallel_model(model: nn.Module, size: int) -> None:
    """Refuse ``context_parallel`` > 1 for a model that cannot spread a window over processes."""
    if size > 1 and not callable(getattr(model, "context_parallel", None)):
        raise InputError(
            f"context_parallel={size}: {type(model).__name__} cannot spread a window over "
            "processes (only the language model, train lm, can)",
            fields=("context_parallel",),
        )
