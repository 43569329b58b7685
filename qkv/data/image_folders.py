"""A user's own labelled pictures: a folder with one subfolder per class.

    flowers/
        daisy/   img001.jpg  img002.png ...
        tulip/   ...

Class names are the subfolder names, sorted.  Each picture goes to "train", "valid" or
"test" by a hash of its path inside the folder (about 80 / 10 / 10 %), so the split of a
picture never changes when pictures are added or removed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from qkv.errors import DataError, MissingFileError

from .karpathy import load_image
from .labelled_images import LabelledImages, stack_images

__all__ = ["IMAGE_SUFFIXES", "read_image_folder", "split_of"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
_SPLITS = ("train", "valid", "test")


def split_of(relative_path: str) -> str:
    """ "train", "valid" or "test" for a picture, from a hash of its path (80 / 10 / 10)."""
    bucket = hashlib.sha256(relative_path.encode("utf-8")).digest()[0] % 10
    return "valid" if bucket == 0 else "test" if bucket == 1 else "train"


def read_image_folder(
    folder: str | Path, split: str, *, image_size: int, size: int | None = None
) -> LabelledImages:
    """The ``split`` of a folder of class subfolders, each picture resized (shorter side) and
    centre-cropped to ``image_size``, as RGB.  ``size`` keeps the first N (in path order).

    Raises MissingFileError for a missing folder, DataError for a folder without class
    subfolders, a class without pictures, or an empty split."""
    folder = Path(folder)
    if split not in _SPLITS:
        raise DataError(f"split={split!r} must be one of {_SPLITS}")
    if not folder.is_dir():
        raise MissingFileError(f"image folder not found: {folder}")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(classes) < 2:
        raise DataError(
            f"{folder} has {len(classes)} class subfolders; a classifier needs at least two "
            "(one subfolder per class, holding that class's pictures)"
        )
    paths, labels = [], []
    for label, name in enumerate(classes):
        pictures = sorted(
            p for p in (folder / name).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES
        )
        if not pictures:
            raise DataError(
                f"class folder {folder / name} holds no pictures ({sorted(IMAGE_SUFFIXES)})"
            )
        for picture in pictures:
            if split_of(picture.relative_to(folder).as_posix()) == split:
                paths.append(picture)
                labels.append(label)
    if size is not None:
        paths, labels = paths[:size], labels[:size]
    if not paths:
        raise DataError(
            f"{folder} gives no {split!r} pictures (about 10% of each class go to valid and "
            "to test: add pictures)"
        )
    images = stack_images(load_image(path, image_size) for path in paths)
    return LabelledImages(images, labels, tuple(classes))
