"""What the captioner's recipe times when the budget is a clock: a captioner of the setup's
sizes and a synthetic batch of the setup's image size (the real vocabulary is known only
after the training captions are read; the output layer is a small part of a step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..data import BOS_ID, EOS_ID, Batch
from ..training import TrainConfig

if TYPE_CHECKING:
    from .captioning import CaptioningSetup

__all__ = ["PROBE_VOCAB", "probe_captioner", "synthetic_batch"]

#: Vocabulary size of the captioner that is timed.
PROBE_VOCAB = 1000


def probe_captioner(
    setup: CaptioningSetup, build: Callable[[CaptioningSetup, int], nn.Module]
) -> nn.Module:
    """The captioner whose steps are timed; with a frozen encoder, steps read cached region
    features, so the decoder alone is timed."""
    model = build(setup, PROBE_VOCAB)
    if setup.freeze_encoder:
        model.encoder.requires_grad_(False)
    return model


def synthetic_batch(setup: CaptioningSetup, num_regions: int, config: TrainConfig) -> Batch:
    """A batch of the size the trainer will make: an image counts as its regions."""
    length = setup.max_caption_len + 2
    size = max(config.max_tokens // max(num_regions, length), 1)
    generator = torch.Generator().manual_seed(0)
    if setup.freeze_encoder:  # the batch carries the cached features (B, P, D)
        images = torch.rand(size, num_regions, setup.feature_dim, generator=generator)
    else:
        images = torch.rand(size, 3, setup.image_size, setup.image_size, generator=generator)
    words = torch.randint(4, PROBE_VOCAB, (size, length), generator=generator)
    words[:, 0], words[:, -1] = BOS_ID, EOS_ID
    return Batch(images, words, torch.arange(size))
