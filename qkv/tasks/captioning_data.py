"""The captioning task's data: the generated scenes or a Karpathy-split JSON, as examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..data.captions import CaptionExample
from ..data.karpathy import read_karpathy
from ..data.scenes import scene_dataset
from ..errors import DataError, InputError, MissingFileError

if TYPE_CHECKING:
    from .captioning import CaptioningSetup

__all__ = ["SCENES", "caption_examples", "caption_splits"]

#: ``data`` value of the generated scenes.
SCENES = "shapes"


def caption_examples(
    data: str,
    split: str,
    *,
    image_size: int,
    images: str | Path | None = None,
    size: int | None = None,
) -> list[CaptionExample]:
    """The ``split`` ("train", "valid" / "val" or "test") of ``data``: "shapes" (the
    generated scenes, drawn at ``image_size``) or a Karpathy JSON whose pictures lie in
    ``images`` (default: the JSON's folder).  ``size`` keeps the first N images.

    Raises MissingFileError for a missing JSON or picture, DataError for anything else
    (not a JSON, missing fields, an empty split)."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise InputError(f"size={size!r} must be a positive number of images", fields=("size",))
    if data == SCENES:
        return scene_dataset(split, image_size=image_size, size=size)
    path = Path(data)
    if not path.exists():
        raise MissingFileError(
            f"data={data!r} is neither {SCENES!r} (the generated scenes) nor an existing "
            "Karpathy-format JSON file",
            fields=("data",),
        )
    if path.is_dir():
        raise DataError(
            f"data={data!r} is a folder; give the Karpathy JSON file inside it", fields=("data",)
        )
    folder = path.parent if images is None else Path(images)
    if not folder.is_dir():
        raise MissingFileError(f"images folder not found: {folder}", fields=("images",))
    examples = read_karpathy(path, folder, split, image_size=image_size)
    return examples if size is None else examples[:size]


def _karpathy_has_split(path: Path, split: str) -> bool:
    """Whether a Karpathy JSON lists any image of ``split`` (errors are left to the reader)."""
    wanted = {"valid": "val"}.get(split, split)
    try:
        records = json.loads(path.read_text(encoding="utf-8")).get("images", [])
        return any(isinstance(r, dict) and r.get("split") == wanted for r in records)
    except (OSError, ValueError, AttributeError):
        return True  # let read_karpathy report what is wrong, in its own words


def caption_splits(setup: CaptioningSetup) -> tuple[list[CaptionExample], list[CaptionExample]]:
    """The training and validation examples of a setup (no validation for a JSON without
    a val split)."""
    options = dict(image_size=setup.image_size, images=setup.images)
    train_examples = caption_examples(setup.data, "train", size=setup.train_size, **options)
    if setup.data != SCENES and not _karpathy_has_split(Path(setup.data), "val"):
        return train_examples, []  # a JSON without a val split trains without validation
    valid_examples = caption_examples(setup.data, "valid", size=setup.valid_size, **options)
    return train_examples, valid_examples
