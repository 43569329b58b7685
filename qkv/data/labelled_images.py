"""Labelled images for classification: Fashion-MNIST, the generated scenes, or a folder.

Every source gives a :class:`LabelledImages`: the pictures as uint8 (N, C, S, S) (C = 1 for
grey, 3 for RGB), the class of each, and the class names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from qkv.errors import DataError

from .fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist
from .scenes import COLOURS, SHAPES, single_object_scenes

__all__ = [
    "LabelledImages",
    "stack_images",
    "fashion_mnist_split",
    "scene_classes",
    "FASHION_MNIST_VALID",
    "SCENE_CLASSES",
]

#: The last 5,000 of the 60,000 Fashion-MNIST training images are the validation split.
FASHION_MNIST_VALID = 5000
#: The classes of single-object scenes: colour and shape ("red circle", ...).
SCENE_CLASSES = tuple(f"{colour} {shape}" for colour in COLOURS for shape in SHAPES)
#: Scenes drawn per split; about a third hold one object and are kept.
_SCENES_DRAWN = {"train": 12000, "valid": 900, "test": 900}


@dataclass(frozen=True)
class LabelledImages:
    """images: (N, C, S, S) uint8; labels: (N,) long in 0..K-1; classes: the K names."""

    images: Tensor
    labels: Tensor | Sequence[int]
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        labels = torch.as_tensor(self.labels, dtype=torch.long)
        object.__setattr__(self, "labels", labels)
        if self.images.dim() != 4 or self.images.dtype != torch.uint8:
            raise DataError(f"images must be uint8 (N, C, S, S), got {self.images.dtype}")
        if len(labels) != len(self.images) or not len(labels):
            raise DataError(f"{len(self.images)} images but {len(labels)} labels")
        if labels.min() < 0 or labels.max() >= len(self.classes):
            raise DataError(f"labels must lie in 0..{len(self.classes) - 1}")

    def __len__(self) -> int:
        return len(self.labels)


def stack_images(images: Iterable[Tensor]) -> Tensor:
    """[0, 1] float pictures (C, S, S) -> one uint8 (N, C, S, S) tensor."""
    return torch.stack(
        [(image * 255.0).round_().clamp_(0, 255).to(torch.uint8) for image in images]
    )


def fashion_mnist_split(split: str, *, size: int | None = None) -> LabelledImages:
    """ "train" (the first 55,000 training images), "valid" (the last 5,000) or "test" (the
    10,000 test images) of Fashion-MNIST, as (N, 1, 28, 28); ``size`` keeps the first N."""
    if split not in ("train", "valid", "test"):
        raise DataError(f"split={split!r} must be 'train', 'valid' or 'test'")
    images, labels = load_fashion_mnist("test" if split == "test" else "train")
    cut = len(images) - FASHION_MNIST_VALID
    chosen = (
        slice(0, cut) if split == "train" else slice(cut, None) if split == "valid" else slice(None)
    )
    images, labels = images[chosen], labels[chosen]
    if size is not None:
        images, labels = images[:size], labels[:size]
    pictures = torch.from_numpy(images.copy()).unsqueeze(1)  # (N, 1, 28, 28)
    return LabelledImages(pictures, torch.from_numpy(labels.astype("int64")), FASHION_MNIST_CLASSES)


def scene_classes(split: str, *, image_size: int = 64, size: int | None = None) -> LabelledImages:
    """The one-object scenes of ``qkv.data.scenes`` labelled by the object's colour and shape
    (18 classes); the splits come from the scenes' own disjoint streams."""
    if split not in _SCENES_DRAWN:
        raise DataError(f"split={split!r} must be one of {tuple(_SCENES_DRAWN)}")
    drawn = _SCENES_DRAWN[split] if size is None else min(_SCENES_DRAWN[split], 4 * size + 40)
    scenes = single_object_scenes(split, image_size=image_size, drawn=drawn)[:size]
    labels = [SCENE_CLASSES.index(f"{obj.colour} {obj.shape}") for obj, _ in scenes]
    return LabelledImages(torch.stack([pixels for _, pixels in scenes]), labels, SCENE_CLASSES)
