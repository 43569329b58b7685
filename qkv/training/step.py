"""What one training step does: forward and backward over its batches, clip, update.

The objective of a step is

    sum of the step's target-token losses / number of target tokens in the step
    + the mean of the model's ``aux_loss`` over this process's batches (when it gives one),

where "the step" is every batch it accumulates on every process.  Each batch's summed loss
is scaled by world_size / (the step's global token count), so the gradients summed over
accumulated batches (and averaged by DDP over processes) are exactly the gradient of that
objective: ``accumulate=4`` with batches of N equals one batch of 4N, padding or not, and N
processes equal one process with all their batches.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..data.batch import Batch
from ..errors import InputError
from .config import TrainConfig
from .distributed import DistributedContext
from .loss import sequence_loss

__all__ = ["TrainStep"]


class TrainStep:
    """One optimizer update over this process's micro-batches.

    model: the bare model (its parameters are clipped); wrapped: what runs forward (the
    model itself, or its DistributedDataParallel wrapper).  From ``config``: label_smoothing,
    clip_norm and bf16 (``autocast``: the forward's autocast context, also for validation).
    shard: with context parallelism, cuts the targets to this rank's tokens as ``wrapped``
    cuts the windows (its logits are of those tokens only).
    """

    def __init__(
        self,
        model: nn.Module,
        wrapped: nn.Module,
        optimizer: Optimizer,
        scheduler: LRScheduler,
        config: TrainConfig,
        context: DistributedContext,
        *,
        shard: Callable[[Tensor, int], Tensor] | None = None,
    ):
        self.model, self.wrapped, self.context, self.shard = model, wrapped, context, shard
        self.optimizer, self.scheduler = optimizer, scheduler
        self.label_smoothing, self.clip_norm = config.label_smoothing, config.clip_norm
        self.autocast = torch.autocast(context.device.type, torch.bfloat16, enabled=config.bf16)

    def __call__(self, micro_batches: list[Batch], *, global_tokens: float) -> Tensor:
        """Update once; returns this process's summed token loss (a detached 0-dim tensor on
        the device, so that the caller never waits for the device)."""
        if not micro_batches or global_tokens <= 0:
            raise InputError(
                f"a step needs batches with target tokens (got {len(micro_batches)} batches, "
                f"{global_tokens} tokens)"
            )
        scale = self.context.world_size / global_tokens
        summed = torch.zeros((), dtype=torch.float64, device=self.context.device)
        for index, batch in enumerate(micro_batches):
            batch = batch.to(self.context.device)
            last = index == len(micro_batches) - 1
            # DDP all-reduces gradients on the last backward of the step only
            sync = nullcontext()
            if not last and self.context.is_distributed:
                sync = self.wrapped.no_sync()
            with sync:
                with self.autocast:
                    output = self.wrapped(batch.source, batch.target_input)
                targets = batch.target_output
                if self.shard is not None:
                    targets = self.shard(targets, batch.pad_id)
                token_loss, _ = sequence_loss(
                    output.logits,
                    targets,
                    pad_id=batch.pad_id,
                    label_smoothing=self.label_smoothing,
                )
                loss = token_loss * scale
                if output.aux_loss is not None:
                    loss = loss + output.aux_loss.float() / len(micro_batches)
                loss.backward()
            summed += token_loss.detach()
        if self.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return summed
