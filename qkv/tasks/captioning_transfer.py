"""Captioning on a transferred CNN: the captioner's region encoder starts from the encoder of
a classifier checkpoint (``qkv train classifier``), and may stay frozen.

A classifier is built on the same ``build_region_encoder`` as the captioner, so its encoder's
weights load into the captioner's as they are, once the encoder fields (``ENCODER_FIELDS``)
agree: :func:`fit_setup_to_classifier` takes them from the classifier.

With a frozen encoder the region features of each image are computed once, in eval mode,
and kept (:class:`CachedRegionData`, as Show, Attend and Tell implementations do); the
captioner reads them in place of the image (``Captioner.encode`` passes region features
through), so a training step costs the decoder's time only.  The cache keeps float32, the
CNN's exact output, and refuses up front when the training images' features would exceed
``FEATURE_CACHE_BYTES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data import Batch
from ..errors import InputError
from .classifier import classifier_checkpoint

__all__ = [
    "ENCODER_FIELDS",
    "FEATURE_CACHE_BYTES",
    "classifier_encoder",
    "fit_setup_to_classifier",
    "load_transferred_encoder",
    "freeze_encoder",
    "CachedRegionData",
]

#: The captioner fields that fix its encoder's shape; a transferred encoder brings its own.
ENCODER_FIELDS = ("encoder", "image_size", "feature_dim", "grid")
#: The frozen encoder's features of the training images are kept up to this many bytes.
FEATURE_CACHE_BYTES = 2 * 1024**3


def classifier_encoder(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """The region encoder of the classifier checkpoint at ``path`` (a run or step folder)
    and the values of ``ENCODER_FIELDS`` it was built with.  Only the CNN transfers: a
    classifier's feature attention and pooling stay behind.

    Raises CheckpointError when ``path`` is no checkpoint, InputError
    when it holds another kind of model."""
    checkpoint, _ = classifier_checkpoint(path)
    config = checkpoint.model.config
    fields = {name: getattr(config, name) for name in ENCODER_FIELDS}
    return checkpoint.model.frames.encoder, fields


def fit_setup_to_classifier(setup: Any) -> Any:
    """``setup`` (a CaptioningSetup) with the encoder fields of its ``encoder_from``
    classifier.  A field the user set away from its default to another value than the
    classifier's is refused (InputError) rather than overridden.  Without ``encoder_from``
    the setup comes back unchanged."""
    if setup.encoder_from is None:
        return setup
    _, fields = classifier_encoder(setup.encoder_from)
    defaults = {field.name: field.default for field in dataclasses.fields(setup)}
    conflicting = [
        name
        for name, value in fields.items()
        if getattr(setup, name) not in (value, defaults[name])
    ]
    if conflicting:
        conflicts = ", ".join(
            f"{name}={getattr(setup, name)!r} (the classifier's: {fields[name]!r})"
            for name in conflicting
        )
        raise InputError(
            f"encoder_from={setup.encoder_from!r}: {conflicts} do not fit the classifier's "
            "encoder; leave those fields at their defaults (they are taken from the classifier)",
            fields=("encoder_from", *conflicting),
        )
    # the weights come from the classifier: no ImageNet download for a torchvision trunk
    return dataclasses.replace(setup, pretrained_encoder=False, **fields)


def load_transferred_encoder(model: nn.Module, path: str | Path) -> None:
    """Copy the classifier's encoder weights (and batch-norm statistics) into the
    captioner ``model``'s encoder, every tensor exactly; InputError when they do not fit."""
    encoder, _ = classifier_encoder(path)
    try:
        model.encoder.load_state_dict(encoder.state_dict(), strict=True)
    except RuntimeError as error:
        raise InputError(
            f"the encoder of {path} does not fit the captioner's ({error}); build the "
            "captioner with the classifier's encoder fields (fit_setup_to_classifier)"
        ) from None


def freeze_encoder(model: nn.Module) -> None:
    """No gradients for the captioner's encoder: the optimiser leaves it as it is."""
    model.encoder.requires_grad_(False)


class CachedRegionData:
    """Caption training data whose batches carry the frozen encoder's region features
    (B, P, D) instead of the images (B, 3, S, S); everything else is ``data``'s.

    Each image is encoded once, in eval mode without gradients, the first time a batch holds
    it, then read from memory.  ``encoder`` must stay frozen while this is used."""

    def __init__(
        self,
        data: Any,
        encoder: nn.Module,
        *,
        num_regions: int,
        feature_dim: int,
        max_bytes: int = FEATURE_CACHE_BYTES,
    ):
        num_images = len(data.dataset.examples)
        needed = num_images * num_regions * feature_dim * 4  # float32
        if needed > max_bytes:
            raise InputError(
                f"freeze_encoder keeps the region features of all {num_images} training "
                f"images: {needed / 1024**3:.1f} GiB, over the limit of "
                f"{max_bytes / 1024**3:.1f} GiB; lower train_size, grid or feature_dim, or "
                "train the encoder (freeze_encoder off)",
                fields=("freeze_encoder", "train_size"),
            )
        self.data, self.encoder = data, encoder
        self.source_lengths, self.target_lengths = data.source_lengths, data.target_lengths
        self.features: dict[int, Tensor] = {}  # example index -> (P, D) float32

    def __len__(self) -> int:
        return len(self.data)

    def collate(self, indices: Sequence[int]) -> Batch:
        batch = self.data.collate(indices)
        images = batch.index.tolist()
        missing = sorted({image for image in images if image not in self.features})
        if missing:
            rows = [images.index(image) for image in missing]
            for image, regions in zip(missing, self._encode(batch.source[rows]), strict=True):
                self.features[image] = regions
        regions = torch.stack([self.features[image] for image in images])  # (B, P, D)
        return Batch(regions, batch.target, batch.index)

    @torch.no_grad()
    def _encode(self, images: Tensor) -> Tensor:
        """Shapes: images (N, 3, S, S) -> regions (N, P, D) on the CPU."""
        was_training = self.encoder.training
        self.encoder.eval()
        try:
            device = next(self.encoder.parameters()).device
            return self.encoder(images.to(device)).float().cpu()
        finally:
            self.encoder.train(was_training)
