"""The classifiers: pictures and clips -> labels on the captioner's CNN, pooled by attention
or mean, or tagged frame by frame through self-attention (`qkv train classifier`, scored by
accuracy, explored on pictures or test clips)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..explore import explorer_of_type
from ..tasks.classifier import (
    CLASSIFIER,
    MODEL_TYPES,
    ClassifierSetup,
    classification_data,
    classifier_checkpoint,
    evaluate_classifier,
    load_classifier,
)
from ..tasks.classifier_explore import classifier_explorer_data
from ..tasks.classifier_run import describe_classifier_scores, train_and_score_classifier
from ..tasks.evaluate import Evaluation, EvaluationRequest
from ..tasks.presets import CLASSIFIER_SIZES
from .record import ExplorerPage, Family, Say, TrainCommand, Trained, ViewRequest

__all__ = ["FAMILY"]

_TYPES = tuple(MODEL_TYPES.values())


def train(
    setup: ClassifierSetup, out_dir: str, *, given: Mapping[str, object], resume: bool, say: Say
) -> Trained:
    """Train, reload the kept checkpoint and score it on the test split."""
    run = train_and_score_classifier(setup, out_dir, given=dict(given), resume=resume, say=say)
    return Trained(
        run.result,
        f"{run.checkpoint} ({run.parameters:,} parameters)",
        lines=tuple(describe_classifier_scores(run.scores)),
        json={"checkpoint": str(run.checkpoint), **run.scores.as_dict()},
    )


def score(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """Accuracy (and, for clips, the occluded frames' and the marked frame's attention)."""
    found, setup = classifier_checkpoint(checkpoint, device=request.device)
    model = found.model
    if request.data is not None and request.data != setup.data:
        setup = dataclasses.replace(setup, data=request.data)
    split = request.split or "test"
    scores = evaluate_classifier(model, classification_data(setup, split, request.limit))
    return Evaluation(
        scores.as_dict(), [f"{setup.data} {split}", *describe_classifier_scores(scores)]
    )


def view(checkpoint: str, inputs: Sequence[str], request: ViewRequest) -> ExplorerPage:
    """Picture files, or the first ``request.test`` test items with their true labels."""
    data = classifier_explorer_data(checkpoint, inputs, test=request.test, device=request.device)
    return ExplorerPage(data)


FAMILY = Family(
    name="classifier",
    model_types=_TYPES,
    setup=ClassifierSetup,
    presets=CLASSIFIER_SIZES,
    spec=CLASSIFIER,
    command=TrainCommand(
        help="train an image or clip classifier on the captioner's CNN",
        description="Train the captioner's CNN encoder with a pooling + linear head on "
        "pictures (fashion-mnist: Debian dataset-fashion-mnist; shapes: the one-object "
        "scenes, colour + shape; or a folder of class subfolders), or on generated clips of "
        "Fashion-MNIST frames: --task clip (one marked frame names the clip) pools the "
        "frames by --pool attention|mean|last; --task per-frame labels every frame through "
        "self-attention blocks over the frames (--tagger-layers 0: each frame alone). "
        "Prints the test accuracy of the best checkpoint; `qkv classify` scores and draws "
        "it later. --max-tokens counts frames (a picture is one).",
        examples="qkv train classifier --data fashion-mnist --out runs/fmnist --max-minutes 4 "
        "--threads 1\nqkv train classifier --data clips --task clip --pool attention --out "
        "runs/clips",
        out_help="run folder (checkpoints, log.jsonl)",
        json_help="print the test scores as JSON",
    ),
    train=train,
    score=score,
    explorers={name: explorer_of_type(name) for name in _TYPES},
    view=view,
    loader=load_classifier,
    commands={
        "image-classifier": "qkv classify --attention-out or qkv explore",
        "clip-classifier": "qkv classify --attention-out or qkv explore --test N",
        "frame-tagger": "qkv classify --attention-out or qkv explore --test N",
    },
)
