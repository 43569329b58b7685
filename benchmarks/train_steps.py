"""One training step of a translation model, and the timing of several models' steps taking
turns: what ``benchmarks.training`` (Transformers), ``benchmarks.recurrent_training`` (the
recurrent translators) and ``benchmarks.cost_vs_length`` share."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from qkv.data.batch import PAD_ID, Batch
from qkv.training.loss import sequence_loss

#: the trainer's default for translation, so a benchmark step does the trainer's work
LABEL_SMOOTHING = 0.1


def make_step(
    model: nn.Module, forward: Callable[[Batch], Tensor], optimizer: torch.optim.Optimizer
) -> Callable[[Batch], float]:
    """One training step on a batch; returns its loss."""

    def step(batch: Batch) -> float:
        loss_sum, count = sequence_loss(
            forward(batch), batch.target_output, pad_id=PAD_ID, label_smoothing=LABEL_SMOOTHING
        )
        loss = loss_sum / count
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def measure(
    steps: dict[str, Callable[[Batch], float]],
    batches: list[Batch],
    *,
    rounds: int,
    warmup: int,
) -> dict[str, list[float]]:
    """Seconds per step for every model, alternating models within and across rounds
    (A B, B A, A B, ...) so slow drift of the machine's speed cancels out."""
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + rounds):
        batch = batches[index % len(batches)]
        order = names if index % 2 == 0 else names[::-1]
        for name in order:
            start = time.perf_counter()
            steps[name](batch)
            if index >= warmup:
                times[name].append(time.perf_counter() - start)
    return times
