"""`qkv train captioning` with defaults that learn: the captioner's recipe, fitted to the run.

:func:`train_captioning` trains with the TrainConfig it is given.  This module chooses that
config's learning rate, warm-up and batch from the captioner's recipe
(:mod:`qkv.training.recipes`), timing a few steps of the captioner the setup describes on
a synthetic batch of the setup's image size when the budget is a clock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..data import BOS_ID, EOS_ID, Batch
from ..training import TrainConfig, TrainResult
from ..training.recipes import UserSchedule, fit_train_config, recipe_for, resumed_schedule
from .captioning import CaptioningSetup, build_captioner, train_captioning

__all__ = ["CAPTIONING_TRAIN_DEFAULTS", "train_captioning_with_recipe"]

#: The trainer's settings that differ for captioning (the recipe sets lr, warm-up, batch):
#: no label smoothing (a caption word has few right answers) and more frequent validation.
CAPTIONING_TRAIN_DEFAULTS = {"label_smoothing": 0.0, "validate_every": 500}

#: Vocabulary size of the captioner that is timed (the real one is known only after the
#: training captions are read; the output layer is a small part of a step).
PROBE_VOCAB = 1000


def train_captioning_with_recipe(
    setup: CaptioningSetup,
    config: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    schedule: UserSchedule,
    say: Callable[[str], object] | None = None,
) -> TrainResult:
    """:func:`train_captioning` with the learning rate, warm-up and batch tokens the
    captioner's recipe chooses for this budget, except what ``schedule`` gives.  A resumed
    run keeps its own values (read from its last checkpoint)."""
    if resume:
        schedule = resumed_schedule(out_dir, schedule)
    with torch.random.fork_rng():  # the probe leaves the run's initialisation alone
        model = build_captioner(setup, PROBE_VOCAB)
    if setup.freeze_encoder:  # steps read cached region features: time the decoder alone
        model.encoder.requires_grad_(False)
    regions = model.config.num_regions
    config, chosen = fit_train_config(
        config,
        recipe_for("captioner", "default"),
        schedule,
        model=model,
        sample=lambda fitted: (_synthetic_batch(setup, regions, fitted), None),
    )
    if say is not None:
        say(chosen.describe())
    return train_captioning(setup, config, out_dir, resume=resume)


def _synthetic_batch(setup: CaptioningSetup, num_regions: int, config: TrainConfig) -> Batch:
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
