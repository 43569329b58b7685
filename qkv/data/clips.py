"""Generated "clips": short videos of Fashion-MNIST frames, for the two sequence shapes
attention serves beyond translation (deterministic, drawn from the real images, nothing
shipped).

- ``task="clip"`` (many-to-one): 8-16 frames; exactly one carries a marker (a bright
  2-pixel border) and the clip's label is that frame's class; every other frame shows an
  item of another class.  A model that averages its frames sees mostly distractors; one
  that attends can read the marked frame alone.
- ``task="per-frame"`` (many-to-many): 8-16 frames, each labelled with its own class; the
  frames come in runs of 2-5 items of one class, and about 30% of frames are heavily
  occluded by a grey square covering 41-62% of the picture, so a model that looks at
  neighbouring frames can recover what one frame alone does not show.

Splits draw from disjoint source images: "train" from the first 55,000 Fashion-MNIST
training images, "valid" from the last 5,000, "test" from the 10,000 test images.  A clip is
fixed by (seed, split, index); its pixels are drawn on access by :func:`render_clip`.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from qkv.errors import DataError

from .fashion_mnist import FASHION_MNIST_CLASSES, load_fashion_mnist
from .labelled_images import FASHION_MNIST_VALID

__all__ = [
    "CLIP_TASKS",
    "CLIP_SPLIT_SIZES",
    "Clip",
    "ClipSet",
    "make_clips",
    "render_clip",
    "clip_split",
]

CLIP_TASKS = ("clip", "per-frame")
CLIP_SPLIT_SIZES = {"train": 20000, "valid": 1000, "test": 2000}
_STREAMS = {"train": 0, "valid": 1, "test": 2}
MARKER_WIDTH = 2  # pixels of the bright border of the marked frame
OCCLUDED_SHARE = 0.3
OCCLUDER_SIDES = (18, 22)  # the grey square's side, in pixels of the 28 x 28 frame
OCCLUDER_LEVEL = 128
RUN_LENGTHS = (2, 5)


@dataclass(frozen=True)
class Clip:
    """frames: indices of the source images (into the split's Fashion-MNIST file);
    labels: each frame's class; label: the clip's class (the marked frame's, task "clip";
    -1 for "per-frame"); marked: the marked frame's position (or None); occluders: per
    frame the (x0, y0, side) of its grey square, or None."""

    frames: tuple[int, ...]
    labels: tuple[int, ...]
    label: int
    marked: int | None
    occluders: tuple[tuple[int, int, int] | None, ...]

    def __len__(self) -> int:
        return len(self.frames)


def _by_class(labels: np.ndarray, allowed: range) -> list[np.ndarray]:
    chosen = np.arange(allowed.start, allowed.stop)
    return [chosen[labels[chosen] == c] for c in range(len(FASHION_MNIST_CLASSES))]


def make_clips(
    labels: np.ndarray,
    allowed: range,
    *,
    task: str,
    count: int,
    seed: int,
    stream: int,
    min_frames: int = 8,
    max_frames: int = 16,
) -> list[Clip]:
    """``count`` clips of ``task`` whose frames are images ``allowed`` (indices into
    ``labels``).  Clip i depends only on (seed, stream, i, labels, allowed)."""
    if task not in CLIP_TASKS:
        raise DataError(f"task={task!r} must be one of {CLIP_TASKS}")
    if not 2 <= min_frames <= max_frames:
        raise DataError(f"need 2 <= min_frames={min_frames} <= max_frames={max_frames}")
    pools = _by_class(labels, allowed)
    classes = [c for c, pool in enumerate(pools) if len(pool)]
    if len(classes) < 2:
        raise DataError("clips need images of at least two classes in the split")
    draw = _draw_clip if task == "clip" else _draw_runs
    clips = []
    for index in range(count):
        rng = random.Random(f"qkv-clips/{task}/{seed}/{stream}/{index}")
        length = rng.randint(min_frames, max_frames)
        clips.append(draw(rng, length, pools, classes))
    return clips


def _draw_clip(rng: random.Random, length: int, pools: list, classes: list[int]) -> Clip:
    label = rng.choice(classes)
    marked = rng.randrange(length)
    labels = [
        label if t == marked else rng.choice([c for c in classes if c != label])
        for t in range(length)
    ]
    frames = tuple(int(rng.choice(pools[c])) for c in labels)
    return Clip(frames, tuple(labels), label, marked, (None,) * length)


def _draw_runs(rng: random.Random, length: int, pools: list, classes: list[int]) -> Clip:
    labels: list[int] = []
    while len(labels) < length:
        previous = labels[-1] if labels else None
        run_class = rng.choice([c for c in classes if c != previous])
        labels += [run_class] * rng.randint(*RUN_LENGTHS)
    labels = labels[:length]
    frames = tuple(int(rng.choice(pools[c])) for c in labels)
    occluders = []
    for _ in range(length):
        if rng.random() < OCCLUDED_SHARE:
            side = rng.randint(*OCCLUDER_SIDES)
            occluders.append((rng.randint(0, 28 - side), rng.randint(0, 28 - side), side))
        else:
            occluders.append(None)
    return Clip(frames, tuple(labels), -1, None, tuple(occluders))


def render_clip(clip: Clip, images: np.ndarray) -> Tensor:
    """The clip's frames from ``images`` (the split's (N, 28, 28) uint8 file), with the
    marker and the occluders drawn.  Shapes: -> (T, 1, 28, 28) uint8."""
    frames = torch.from_numpy(images[list(clip.frames)].copy()).unsqueeze(1)  # (T, 1, 28, 28)
    if clip.marked is not None:
        frame, width = frames[clip.marked, 0], MARKER_WIDTH
        frame[:width, :] = frame[-width:, :] = frame[:, :width] = frame[:, -width:] = 255
    for t, box in enumerate(clip.occluders):
        if box is not None:
            x0, y0, side = box
            frames[t, 0, y0 : y0 + side, x0 : x0 + side] = OCCLUDER_LEVEL
    return frames


@dataclass(frozen=True)
class ClipSet:
    """The clips of one split, the Fashion-MNIST file they index, and the class names."""

    clips: list[Clip]
    images: np.ndarray
    classes: tuple[str, ...] = FASHION_MNIST_CLASSES

    def __len__(self) -> int:
        return len(self.clips)

    def frames(self, index: int) -> Tensor:
        """Shapes: -> (T, 1, 28, 28) uint8."""
        return render_clip(self.clips[index], self.images)


@functools.lru_cache(maxsize=8)
def _clips(task: str, split: str, seed: int, size: int) -> tuple[list[Clip], np.ndarray]:
    images, labels = load_fashion_mnist("test" if split == "test" else "train")
    cut = len(images) - FASHION_MNIST_VALID
    allowed = {"train": range(0, cut), "valid": range(cut, len(images))}.get(
        split, range(len(images))
    )
    clips = make_clips(labels, allowed, task=task, count=size, seed=seed, stream=_STREAMS[split])
    return clips, images


def clip_split(task: str, split: str, *, size: int | None = None, seed: int = 0) -> ClipSet:
    """The ``split`` ("train", "valid", "test") of the ``task`` ("clip" or "per-frame")
    clips: ``size`` clips (default 20,000 / 1,000 / 2,000).  Needs Debian's
    ``dataset-fashion-mnist`` (MissingFileError naming it otherwise)."""
    if split not in _STREAMS:
        raise DataError(f"split={split!r} must be one of {tuple(_STREAMS)}")
    size = CLIP_SPLIT_SIZES[split] if size is None else size
    if size < 1:
        raise DataError(f"size={size} must be a positive number of clips")
    clips, images = _clips(task, split, seed, size)
    return ClipSet(clips, images)
