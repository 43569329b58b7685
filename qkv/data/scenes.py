"""Generated "shapes" scenes with captions: the captioning data that needs no download.

Each RGB image (64x64 by default) shows 1-3 non-overlapping objects, each a small or large
red / green / blue / yellow / purple / white circle, square or triangle, on a plain grey
background, lightly noised in half of the images (objects are drawn in their exact colour).
Within a scene no two objects share both colour and shape, and objects are numbered left
to right. Captions follow a small fixed grammar, with two references per image:

- one object:    "a small red circle", "a small red circle at the top left"
- two objects:   "a small red circle left of a large blue square" and the converse
                 "a large blue square right of a small red circle"
- three objects: "a A <rel> a B and a C", "a B <rel> a C and a A"

where <rel> is "left of" / "right of" when the centres differ more across than down, else
"above" / "below" (layouts where both differences are close are redrawn).

Every example keeps its ``objects`` (box, shape, colour, size) and, per caption, the word
positions of each object's colour and shape words, so attention maps can be scored against
the boxes. Scenes are drawn on access from a seed: (seed, split, index) fixes an image.
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from qkv.data.captions import CaptionExample

__all__ = [
    "SceneObject",
    "SHAPES",
    "COLOURS",
    "SIZES",
    "SCENE_SPLIT_SIZES",
    "scene_dataset",
    "single_object_scenes",
]

SHAPES = ("circle", "square", "triangle")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "purple": (150, 60, 190),
    "white": (240, 240, 240),
}
SIZES = {"small": 0.2, "large": 0.34}  # side of the object's box, as a fraction of the image
SCENE_SPLIT_SIZES = {"train": 4000, "valid": 300, "test": 300}
_SPLIT_STREAMS = {"train": 0, "valid": 1, "test": 2}
_GAP = 2  # pixels kept free between two objects' boxes
_NOISE_STD = 6.0  # grey levels of background noise, where there is noise
_REGIONS = (
    ("top left", "top", "top right"),
    ("left", "centre", "right"),
    ("bottom left", "bottom", "bottom right"),
)


class SceneObject(NamedTuple):
    """One drawn object; ``box`` is (x0, y0, x1, y1) in pixels, x1 and y1 exclusive, so
    ``image[:, y0:y1, x0:x1]`` is exactly the object's square."""

    shape: str
    colour: str
    size: str
    box: tuple[int, int, int, int]

    @property
    def centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.box
        return (x0 + x1) / 2, (y0 + y1) / 2


class _Scene(NamedTuple):
    objects: tuple[SceneObject, ...]
    background: int  # grey level
    noise_seed: int | None  # None: plain background


def _overlaps(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return not (
        a[2] + _GAP <= b[0] or b[2] + _GAP <= a[0] or a[3] + _GAP <= b[1] or b[3] + _GAP <= a[1]
    )


def _relation(a: SceneObject, b: SceneObject) -> list[str]:
    """Where ``a`` is with respect to ``b``, as caption words."""
    dx, dy = a.centre[0] - b.centre[0], a.centre[1] - b.centre[1]
    if abs(dx) >= abs(dy):
        return ["left", "of"] if dx < 0 else ["right", "of"]
    return ["above"] if dy < 0 else ["below"]


_KINDS = [(colour, shape) for colour in COLOURS for shape in SHAPES]


def _sample_scene(rng: random.Random, image_size: int) -> _Scene:
    count = _object_count(rng)
    margin = max(2.0, 0.06 * image_size)  # |dx| and |dy| of two objects differ by this much
    while True:  # redraw until the objects fit and every relation is clear
        objects: list[SceneObject] = []
        for colour, shape in sorted(rng.sample(_KINDS, count)):
            size = rng.choice(list(SIZES))
            side = round(SIZES[size] * image_size)
            for _ in range(50):
                x0, y0 = (
                    rng.randint(1, image_size - side - 1),
                    rng.randint(1, image_size - side - 1),
                )
                box = (x0, y0, x0 + side, y0 + side)
                if not any(_overlaps(box, other.box) for other in objects):
                    objects.append(SceneObject(shape, colour, size, box))
                    break
        if len(objects) < count:
            continue
        objects.sort(key=lambda o: o.centre)
        clear = all(
            abs(abs(a.centre[0] - b.centre[0]) - abs(a.centre[1] - b.centre[1])) >= margin
            for i, a in enumerate(objects)
            for b in objects[i + 1 :]
        )
        if clear:
            noise_seed = rng.randrange(2**31) if rng.random() < 0.5 else None
            return _Scene(tuple(objects), rng.randint(70, 150), noise_seed)


def _object_count(rng: random.Random) -> int:
    """A scene's first draw: how many objects it holds."""
    return rng.randint(1, 3)


def _object_mask(obj: SceneObject) -> np.ndarray:
    """(side, side) bool over the object's box: the pixels whose centres lie inside it."""
    x0, y0, x1, y1 = obj.box
    return _shape_mask(obj.shape, x1 - x0, y1 - y0)


@functools.lru_cache(maxsize=64)
def _shape_mask(shape: str, width: int, height: int) -> np.ndarray:
    """The mask of a ``shape`` filling a (height, width) box (read-only: shared)."""
    ys, xs = np.mgrid[0:height, 0:width] + 0.5  # box coordinates
    half = width / 2
    if shape == "square":
        mask = np.ones(xs.shape, dtype=bool)
    elif shape == "circle":
        mask = (xs - half) ** 2 + (ys - half) ** 2 <= half**2
    else:
        mask = np.abs(xs - half) <= ys / 2  # triangle: apex at the top centre, base at the bottom
    mask.flags.writeable = False
    return mask


def _render(scene: _Scene, image_size: int) -> Tensor:
    """Shapes: -> (3, S, S) float in [0, 1]."""
    return _pixels(scene, image_size).float().div_(255.0)


def _pixels(scene: _Scene, image_size: int) -> Tensor:
    """Shapes: -> (3, S, S) uint8."""
    pixels = np.full((image_size, image_size, 3), float(scene.background))
    if scene.noise_seed is not None:
        noise = np.random.default_rng(scene.noise_seed).normal(0.0, _NOISE_STD, (image_size,) * 2)
        pixels += noise[..., None]
    pixels = np.clip(np.rint(pixels), 0, 255)
    for obj in scene.objects:
        x0, y0, x1, y1 = obj.box
        pixels[y0:y1, x0:x1][_object_mask(obj)] = COLOURS[obj.colour]
    return torch.from_numpy(pixels.astype(np.uint8)).permute(2, 0, 1).contiguous()


def _captions(scene: _Scene, image_size: int) -> tuple[list[list[str]], list[dict[int, int]]]:
    """Reference captions and, for each, word position -> object index (colour, shape words)."""
    objects = scene.objects

    def phrase(parts: list) -> tuple[list[str], dict[int, int]]:
        words, grounding = [], {}
        for part in parts:
            if isinstance(part, int):  # an object: "a <size> <colour> <shape>"
                obj = objects[part]
                grounding[len(words) + 2] = grounding[len(words) + 3] = part
                words += ["a", obj.size, obj.colour, obj.shape]
            else:
                words += part
        return words, grounding

    if len(objects) == 1:
        cx, cy = objects[0].centre
        row, column = (min(int(3 * v / image_size), 2) for v in (cy, cx))
        plans = [[0], [0, ["at", "the", *_REGIONS[row][column].split()]]]
    elif len(objects) == 2:
        plans = [
            [0, _relation(objects[0], objects[1]), 1],
            [1, _relation(objects[1], objects[0]), 0],
        ]
    else:
        plans = [
            [0, _relation(objects[0], objects[1]), 1, ["and"], 2],
            [1, _relation(objects[1], objects[2]), 2, ["and"], 0],
        ]
    captions, groundings = zip(*(phrase(plan) for plan in plans), strict=True)
    return list(captions), list(groundings)


def _checked(split: str, image_size: int, seed: int) -> str:
    """The split's name ("val" read as "valid"), once the arguments are known good."""
    split = "valid" if split == "val" else split
    if split not in _SPLIT_STREAMS:
        raise ValueError(f"split={split!r} must be one of {tuple(_SPLIT_STREAMS)}")
    if seed < 0:
        raise ValueError(f"seed={seed} must be a non-negative integer")
    if image_size < 32:
        raise ValueError(f"image_size={image_size} is too small to draw objects; use 32 or more")
    return split


def _scene_rng(split: str, seed: int, index: int) -> random.Random:
    return random.Random(f"qkv-scenes/{seed}/{_SPLIT_STREAMS[split]}/{index}")


@functools.lru_cache(maxsize=16)
def _scenes(split: str, image_size: int, seed: int, size: int) -> tuple[_Scene, ...]:
    return tuple(_sample_scene(_scene_rng(split, seed, index), image_size) for index in range(size))


def single_object_scenes(
    split: str, *, image_size: int = 64, seed: int = 0, drawn: int
) -> list[tuple[SceneObject, Tensor]]:
    """(object, (3, S, S) uint8 picture) of each scene among the split's first ``drawn``
    that holds one object, in order: the same scenes as ``scene_dataset``'s, found without
    drawing the others (a scene's object count is its first draw)."""
    split = _checked(split, image_size, seed)
    if drawn < 1:
        raise ValueError(f"drawn={drawn} must be a positive number of scenes")
    chosen = []
    for index in range(drawn):
        if _object_count(_scene_rng(split, seed, index)) == 1:
            scene = _sample_scene(_scene_rng(split, seed, index), image_size)
            chosen.append((scene.objects[0], _pixels(scene, image_size)))
    return chosen


def scene_dataset(
    split: str, *, image_size: int = 64, seed: int = 0, size: int | None = None
) -> list[CaptionExample]:
    """The ``split`` ("train", "valid" or "test") of the shapes scenes: ``size`` images
    (default 4000 / 300 / 300), each a ``CaptionExample`` whose ``image`` is drawn on access
    as a (3, image_size, image_size) float tensor in [0, 1]. The same (split, index, seed,
    image_size) always gives the same scene, and the splits draw from separate streams."""
    split = _checked(split, image_size, seed)
    size = SCENE_SPLIT_SIZES[split] if size is None else size
    if size < 1:
        raise ValueError(f"size={size} must be a positive number of images")
    examples = []
    for index, scene in enumerate(_scenes(split, image_size, seed, size)):
        captions, groundings = _captions(scene, image_size)
        examples.append(
            CaptionExample(
                image_id=f"scene-{split}-{seed}-{index:05d}",
                captions=captions,
                raw=[" ".join(words) for words in captions],
                load_image=functools.partial(_render, scene, image_size),
                objects=scene.objects,
                grounding=tuple(groundings),
            )
        )
    return examples
