"""A trained classifier's attention on the explorer page (``qkv explore``): pictures from
files or test items, clips from the test split of the built-in ``clips`` data."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..data.karpathy import load_image
from ..errors import InputError
from ..explore import explorable_kind, explore
from .classifier import classification_data, classifier_checkpoint

__all__ = ["classifier_explorer_data"]


def classifier_explorer_data(
    checkpoint: str | Path,
    paths: Sequence[str | Path] = (),
    *,
    test: int | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """The explorer's data (``qkv.explore.explore``) for a classifier checkpoint on either
    picture files (image classifiers; no true label) or the first ``test`` items of the test
    split of the data it was trained on (with their true labels)."""
    found, setup = classifier_checkpoint(checkpoint, device=device)
    model, classes = found.model, list(found.metadata["classes"])
    explorable_kind(model)  # a model without attention weights is refused before any work
    if (test is None) == (not paths):
        raise InputError(
            "pass picture files or test=N (the first N test items), one of them",
            fields=("test",),
        )
    if test is not None:
        if test < 1:
            raise InputError(f"test={test} must be a positive number of items", fields=("test",))
        data = classification_data(setup, "test", test)
        inputs = [data.collate([i]).source[0] for i in range(len(data))]  # one item: no padding
        labels = [data.labels(i) for i in range(len(data))]  # class ids
        labels = [ids if setup.task == "per-frame" else ids[0] for ids in labels]
        names = [f"test {i + 1}" for i in range(len(data))]
        return explore(model, inputs, tokenizer=classes, labels=labels, names=names)
    if setup.task != "image":
        raise InputError(
            f"this classifier reads clips ({setup.task!r}): explore it on test clips with "
            "test=N, not on picture files",
            fields=("test",),
        )
    channels = model.config.channels
    pictures = []
    for path in paths:
        picture = load_image(path, setup.image_size)  # (3, S, S)
        pictures.append(picture.mean(dim=0, keepdim=True) if channels == 1 else picture)
    names = [Path(path).name for path in paths]
    return explore(model, pictures, tokenizer=classes, names=names)
