"""Scoring a classifier: accuracy per picture, clip or frame, and for clips what the
generated data lets one check (accuracy on occluded frames, attention on the marked frame)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..data.batch import PAD_ID
from ..data.clips import ClipSet
from ..decoding import check_scores
from ..training.loss import sequence_loss

if TYPE_CHECKING:
    from .classifier import ClassificationData

__all__ = ["ClassifierScores", "evaluate_classifier"]


@dataclass
class ClassifierScores:
    """accuracy: share of labels right (per clip, picture or frame); loss: mean
    cross-entropy per label (the training loss without smoothing).  For per-frame clips,
    occluded_accuracy / clear_accuracy: the same on occluded / unoccluded frames.  For clips
    pooled by attention, marked_weight: mean attention weight on the marked frame (a
    uniform pooling gives 1 / frames, ``uniform_weight``)."""

    accuracy: float
    count: int
    loss: float | None = None
    occluded_accuracy: float | None = None
    clear_accuracy: float | None = None
    marked_weight: float | None = None
    uniform_weight: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items() if v is not None}


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module, data: ClassificationData, *, batch_size: int = 64
) -> ClassifierScores:
    """Score ``model`` (in eval mode; its mode is restored) on every item of ``data``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    clips = data.items.clips if isinstance(data.items, ClipSet) else None
    tally = _Tally()
    try:
        for start in range(0, len(data), batch_size):
            indices = list(range(start, min(start + batch_size, len(data))))
            batch = data.collate(indices).to(device)
            output = model.classify(batch.source, need_attention=data.task == "clip")
            gold = batch.target_output  # (B, T)
            check_scores(output.logits[..., 1:], "the classes")  # no accuracy from NaN
            guess = output.logits[..., 1:].argmax(dim=-1) + 1  # never the <pad> id
            hit = ((guess == gold) & (gold != PAD_ID)).cpu()
            tally.count(hit, int((gold != PAD_ID).sum()))
            tally.loss_sum += float(sequence_loss(output.logits, gold, pad_id=PAD_ID)[0])
            if clips is not None and data.task == "per-frame":
                occluded = torch.zeros_like(hit)
                for row, index in enumerate(indices):
                    occluded[row, : len(clips[index])] = torch.tensor(
                        [box is not None for box in clips[index].occluders]
                    )
                tally.count_occluded(hit, occluded)
            elif clips is not None and output.attention and "frames" in output.attention:
                weights = output.attention["frames"][0][:, 0].cpu()  # (B, T)
                for row, index in enumerate(indices):
                    tally.marked.append(float(weights[row, clips[index].marked]))
                    tally.uniform.append(1.0 / len(clips[index]))
    finally:
        model.train(was_training)
    return tally.scores()


@dataclass
class _Tally:
    """Running counts of :func:`evaluate_classifier`."""

    right: int = 0
    total: int = 0
    loss_sum: float = 0.0
    occluded_right: int = 0
    occluded: int | None = None
    marked: list[float] = dataclasses.field(default_factory=list)
    uniform: list[float] = dataclasses.field(default_factory=list)

    def count(self, hit: torch.Tensor, labels: int) -> None:
        self.right += int(hit.sum())
        self.total += labels

    def count_occluded(self, hit: torch.Tensor, occluded: torch.Tensor) -> None:
        self.occluded_right += int((hit & occluded).sum())
        self.occluded = (self.occluded or 0) + int(occluded.sum())

    def scores(self) -> ClassifierScores:
        total = max(self.total, 1)
        scores = ClassifierScores(self.right / total, self.total, self.loss_sum / total)
        if self.occluded is not None:
            clear = self.total - self.occluded
            scores.occluded_accuracy = self.occluded_right / max(self.occluded, 1)
            scores.clear_accuracy = (self.right - self.occluded_right) / max(clear, 1)
        if self.marked:
            scores.marked_weight = sum(self.marked) / len(self.marked)
            scores.uniform_weight = sum(self.uniform) / len(self.uniform)
        return scores
