"""Validation: the loss over held-out data, and which metric decides the best model."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from .distributed import DistributedContext, all_reduce_sum, broadcast_object
from .loss import sequence_loss
from .schedules import PlateauLR
from .state import BatchSampler, TrainerState, TrainingData

__all__ = [
    "scores_the_loss",
    "SampledBatches",
    "Validation",
    "validate",
    "validation_loss",
    "choose_metric",
    "improves",
    "update_best",
    "record_validation",
]

#: Metrics where larger is better; every other metric (losses) is better when smaller.
HIGHER_IS_BETTER = frozenset({"bleu", "chrf", "accuracy"})


def scores_the_loss(evaluate: Callable[[nn.Module], Mapping[str, float]]):
    """Mark an evaluate callback that reports ``valid_loss`` and ``valid_ppl`` itself, over
    every validation item and from the same forward pass as its other metrics: validation
    then makes no loss pass of its own (one pass over the data, not two)."""

    def marked(model: nn.Module) -> Mapping[str, float]:
        return evaluate(model)

    marked.scores_the_loss = True  # any callable: a bound method cannot take the attribute
    return marked


class SampledBatches:
    """``count`` of another sampler's epoch-0 batches, spread evenly over its list (the first,
    the last and evenly between), the same ones at every call: a validation that costs a fixed
    share of the run and scores the same examples each time.  Every batch when ``count`` is at
    least their number."""

    def __init__(self, batches: BatchSampler, count: int):
        if count < 1:
            raise ValueError(f"count={count} must be at least 1")
        every = batches.batches(0)
        if count >= len(every):
            self.chosen = every
        else:
            spacing = (len(every) - 1) / max(count - 1, 1)
            self.chosen = [every[round(i * spacing)] for i in range(count)]

    def batches(self, epoch: int) -> list[list[int]]:
        return [list(batch) for batch in self.chosen]


class Validation:
    """What a run's validations score: ``sample`` of the validation batches spread evenly
    (``SampledBatches``; 0, or as many as there are: all of them) at each validation, and
    all of them too at the last one (``valid_loss_full``, ``valid_ppl_full``)."""

    def __init__(
        self,
        data: TrainingData,
        batches: BatchSampler,
        context: DistributedContext,
        *,
        sample: int,
        evaluate: Callable[[nn.Module], Mapping[str, float]] | None,
        autocast: AbstractContextManager,
    ):
        self.data, self.all_batches, self.context = data, batches, context
        # An evaluate callback that scores the loss scores every item: nothing to sample.
        sampling = 0 < sample < len(batches.batches(0)) and not _scores_loss(evaluate)
        self.sampled = SampledBatches(batches, sample) if sampling else None
        self.evaluate, self.autocast = evaluate, autocast

    def __call__(self, model: nn.Module, *, last: bool = False) -> dict[str, float]:
        """Validate (``validate``); at the ``last`` validation, the full text as well."""
        batches = self.sampled or self.all_batches
        metrics = validate(
            model,
            self.data,
            batches,
            self.context,
            evaluate=self.evaluate,
            autocast=self.autocast,
        )
        if last:
            metrics.update(self.full_text(model))
        return metrics

    def full_text(self, model: nn.Module) -> dict[str, float]:
        """The loss over all the validation batches (``*_full``); {} when every validation
        scores them all already."""
        if self.sampled is None:
            return {}
        model.eval()
        with torch.no_grad(), self.autocast:
            metrics = validation_loss(model, self.data, self.all_batches, self.context)
        model.train()
        return {f"{name}_full": value for name, value in metrics.items()}


def validate(
    model: nn.Module,
    data: TrainingData,
    batches: BatchSampler,
    context: DistributedContext,
    *,
    evaluate: Callable[[nn.Module], Mapping[str, float]] | None,
    autocast: AbstractContextManager,
) -> dict[str, float]:
    """Validation loss (all ranks; unless the evaluate callback ``scores_the_loss``) and the
    evaluate callback's metrics (rank 0), the same on every rank; leaves the model in
    training mode."""
    model.eval()
    with torch.no_grad():
        metrics = {}
        if not _scores_loss(evaluate):
            with autocast:
                metrics = validation_loss(model, data, batches, context)
        extra = {}
        if evaluate is not None and context.is_main:
            extra = {key: float(value) for key, value in evaluate(model).items()}
    metrics.update(broadcast_object(extra, context))
    model.train()
    return metrics


def _scores_loss(evaluate: Callable | None) -> bool:
    return getattr(evaluate, "scores_the_loss", False)


def validation_loss(
    model: nn.Module,
    data: TrainingData,
    batches: BatchSampler,
    context: DistributedContext,
) -> dict[str, float]:
    """Mean cross-entropy per target token (no label smoothing) and its perplexity.

    Each rank scores every world_size-th batch; the sums are added over ranks, so every
    rank returns the same numbers.  Call in eval mode under ``torch.no_grad()``.
    """
    sums = torch.zeros(2, dtype=torch.float64, device=context.device)
    for indices in batches.batches(0)[context.rank :: context.world_size]:
        batch = data.collate(indices).to(context.device)
        output = model(batch.source, batch.target_input)
        loss_sum, tokens = sequence_loss(output.logits, batch.target_output, pad_id=batch.pad_id)
        sums += torch.stack([loss_sum.double(), tokens.double()])
    loss_sum, tokens = all_reduce_sum(sums, context).tolist()
    if tokens == 0:
        raise ValueError("the validation data has no target tokens")
    loss = loss_sum / tokens
    return {"valid_loss": loss, "valid_ppl": math.exp(min(loss, 700.0))}


def choose_metric(metrics: dict[str, float]) -> str:
    """BLEU when the evaluate callback reports it, else the validation loss."""
    return "bleu" if "bleu" in metrics else "valid_loss"


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether ``value`` beats ``best`` (NaN never does)."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value > best if metric in HIGHER_IS_BETTER else value < best


def update_best(state: TrainerState, metrics: dict[str, float]) -> bool:
    """Track the best validation and the validations since; True when this one is the best."""
    state.best_metric = state.best_metric or choose_metric(metrics)
    value = metrics.get(state.best_metric)
    if value is None:
        raise ValueError(f"validation stopped reporting {state.best_metric!r}: got {metrics}")
    if improves(state.best_metric, value, state.best_value):
        state.best_value, state.best_step, state.bad_validations = value, state.step, 0
        return True
    state.bad_validations += 1
    return False


def record_validation(
    state: TrainerState, metrics: dict[str, float], scheduler: LRScheduler
) -> bool:
    """After a validation: track the best (``update_best``) and tell a plateau schedule the
    validation loss (it may lower the lr of the next step).  True when this one is the best;
    no metrics (no validation data) is never the best."""
    if not metrics:
        return False
    if isinstance(scheduler, PlateauLR):
        scheduler.observe(metrics["valid_loss"])
    return update_best(state, metrics)
