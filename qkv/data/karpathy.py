"""Real captioning datasets (Flickr8k, Flickr30k, COCO) in the Karpathy-split JSON format:

    {"images": [{"filename": "1000268201.jpg", "filepath": "val2014" (optional),
                 "split": "train" | "val" | "test" | "restval",
                 "sentences": [{"tokens": ["a", "child", ...], "raw": "A child ..."}, ...]},
                ...]}

with the pictures under one folder (``images_dir / filepath / filename``). ``restval``
counts as train (Karpathy's convention); "valid" is accepted for "val".

Images go through the same pipeline as the generated scenes, so a model sees one format:
any PIL mode is converted to RGB (grayscale replicated to three channels, transparency
composited onto white, palettes expanded), the EXIF orientation is applied, the shorter
side is resized to ``image_size`` (bicubic) and the centre square cropped, giving a float
tensor (3, image_size, image_size) in [0, 1]. An encoder pretrained on ImageNet applies
ImageNet's normalisation itself (``qkv.layers.cnn``).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError
from torch import Tensor

from qkv.data.captions import CaptionExample
from qkv.errors import DataError, InputError, MissingFileError

__all__ = ["KARPATHY_SPLITS", "load_image", "read_karpathy", "tokenize_caption"]

KARPATHY_SPLITS = ("train", "val", "test")
_SPLIT_OF = {"train": "train", "restval": "train", "val": "val", "valid": "val", "test": "test"}
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize_caption(text: str) -> list[str]:
    """Lowercase words of a caption, punctuation dropped (as in the Karpathy tokens)."""
    return _WORD.findall(text.lower())


def load_image(path: str | Path, image_size: int) -> Tensor:
    """Read one picture file into the captioning format.

    Shapes: -> (3, image_size, image_size) float in [0, 1].
    Raises MissingFileError for a missing file, DataError naming a file that is not an image.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a picture file")
    if not path.is_file():
        raise MissingFileError(f"image file not found: {path}")
    try:
        with Image.open(path) as opened:
            image = ImageOps.exif_transpose(opened)
            image.load()
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise DataError(f"cannot read {path} as an image: {error}") from None
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    image = image.convert("RGB")
    scale = image_size / min(image.size)
    width, height = (max(image_size, round(side * scale)) for side in image.size)
    image = image.resize((width, height), Image.Resampling.BICUBIC)
    left, top = (width - image_size) // 2, (height - image_size) // 2
    image = image.crop((left, top, left + image_size, top + image_size))
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())  # (S, S, 3)
    return pixels.permute(2, 0, 1).float().div_(255.0)


def _field(record: dict, name: str, where: str, json_path: Path):
    if not isinstance(record, dict) or name not in record:
        raise DataError(f"{json_path}: {where} has no field {name!r}")
    return record[name]


def read_karpathy(
    json_path: str | Path, images_dir: str | Path, split: str, *, image_size: int = 224
) -> list[CaptionExample]:
    """The ``split`` ("train" incl. restval, "val" / "valid", or "test") of a Karpathy JSON,
    each image loaded lazily (on ``example.image``) as (3, image_size, image_size) in [0, 1].

    Raises MissingFileError naming a missing JSON or image file, and DataError for
    invalid JSON, a missing field (named, with the image's index), or an empty split.
    """
    if split not in _SPLIT_OF or split == "restval":
        raise InputError(
            f"split={split!r} must be one of {KARPATHY_SPLITS} (or 'valid')", fields=("split",)
        )
    if image_size < 1:
        raise InputError(
            f"image_size={image_size} must be a positive number of pixels",
            fields=("image_size",),
        )
    json_path, images_dir = Path(json_path), Path(images_dir)
    if not json_path.is_file():
        raise MissingFileError(f"Karpathy caption file not found: {json_path}")
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{json_path} is not valid JSON: {error}") from None
    images = _field(data, "images", "the top level", json_path)
    if not isinstance(images, list):
        raise DataError(f"{json_path}: 'images' must be a list, got {type(images).__name__}")

    wanted, present, examples = _SPLIT_OF[split], set(), []
    for number, record in enumerate(images):
        where = f"images[{number}]"
        image_split = _field(record, "split", where, json_path)
        if image_split not in _SPLIT_OF:
            raise DataError(
                f"{json_path}: {where} has split {image_split!r}, not one of "
                "train / val / test / restval"
            )
        present.add(image_split)
        if _SPLIT_OF[image_split] != wanted:
            continue
        filename = _field(record, "filename", where, json_path)
        sentences = _field(record, "sentences", where, json_path)
        if not isinstance(sentences, list):
            raise DataError(f"{json_path}: {where}.sentences must be a list of sentences")
        captions, raw = [], []
        for index, sentence in enumerate(sentences):
            if isinstance(sentence, dict) and "tokens" in sentence:
                tokens = [str(token).lower() for token in sentence["tokens"]]
            else:
                text = _field(
                    sentence, "raw", f"{where}.sentences[{index}] (tokens or raw)", json_path
                )
                tokens = tokenize_caption(text)
            captions.append(tokens)
            raw.append(sentence.get("raw", " ".join(tokens)))
        if not captions:
            raise DataError(f"{json_path}: {where} ({filename}) has no sentences")
        path = images_dir / record.get("filepath", "") / filename
        if not path.is_file():
            raise MissingFileError(f"image file not found: {path} (from {where} of {json_path})")
        examples.append(
            CaptionExample(
                image_id=str(Path(record.get("filepath", "")) / filename),
                captions=captions,
                raw=raw,
                load_image=functools.partial(load_image, path, image_size),
            )
        )
    if not examples:
        raise DataError(
            f"{json_path} has no images in split {split!r}; splits present: "
            f"{sorted(present) or 'none'}"
        )
    return examples
