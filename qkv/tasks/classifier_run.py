"""A classifier run from start to score: train with the preset, reload the best
checkpoint, score it on the test split (what ``qkv train classifier`` does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..training import TrainResult
from .classifier import (
    CLASSIFIER,
    ClassifierScores,
    ClassifierSetup,
    classification_data,
    evaluate_classifier,
    load_classifier,
)
from .task import train_with_options

__all__ = ["ClassifierRun", "train_and_score_classifier", "describe_classifier_scores"]


@dataclass(frozen=True)
class ClassifierRun:
    """A finished classifier run: how it ended, the checkpoint it keeps (the best, else the
    last), that model's parameter count and its scores on the test split."""

    result: TrainResult
    checkpoint: Path
    parameters: int
    scores: ClassifierScores


def train_and_score_classifier(
    setup: ClassifierSetup,
    out_dir: str | Path,
    *,
    given: dict,
    resume: bool = False,
    say: Callable[[str], object] | None = None,
) -> ClassifierRun:
    """Train with the preset's values except those ``given`` (TrainConfig fields), reload
    the best checkpoint and score it on the test split."""
    result = train_with_options(CLASSIFIER, setup, out_dir, given=given, resume=resume, say=say)
    best = result.best_checkpoint or result.last_checkpoint
    model = load_classifier(best).model
    scores = evaluate_classifier(model, classification_data(setup, "test"))
    parameters = sum(p.numel() for p in model.parameters())
    return ClassifierRun(result, Path(best), parameters, scores)


def describe_classifier_scores(scores: ClassifierScores) -> list[str]:
    """A classifier's scores in words (``ClassifierScores``)."""
    lines = [f"accuracy: {scores.accuracy:.2%} of {scores.count}"]
    if scores.occluded_accuracy is not None:
        lines.append(
            f"occluded frames: {scores.occluded_accuracy:.2%}, clear frames: "
            f"{scores.clear_accuracy:.2%}"
        )
    if scores.marked_weight is not None:
        lines.append(
            f"attention on the marked frame: {scores.marked_weight:.1%} "
            f"(uniform: {scores.uniform_weight:.1%})"
        )
    return lines
