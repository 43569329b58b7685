"""Captioning picture files with a trained captioner (what `qkv caption` calls): the
captions, and with ``attention_out`` one attention strip per picture."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..decoding.search import check_search
from ..errors import CheckpointError, DataError, InputError
from .image_captioner import Caption, ImageCaptioner, plot_caption_attention
from .translator import reading_errors

__all__ = ["CaptionedFile", "attention_paths", "caption_files"]


@dataclass(frozen=True)
class CaptionedFile:
    """One picture file's caption, and its attention strip (None: none asked for)."""

    file: str
    caption: Caption
    strip: Path | None = None


def attention_paths(path: str | Path, count: int) -> list[Path]:
    """Where the strips of ``count`` images go: ``path`` itself for one image, else
    ``<stem>-0.png``, ``<stem>-1.png``, ... beside it."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InputError(
            f"attention_out {str(path)!r} must be a .png file", fields=("attention_out",)
        )
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{index}{path.suffix}") for index in range(count)]


def caption_files(
    checkpoint: str | Path,
    files: Sequence[str],
    *,
    beam: int = 1,
    length_penalty: float = 1.0,
    attention_out: str | Path | None = None,
    device: str = "cpu",
) -> list[CaptionedFile]:
    """Caption picture ``files`` with the captioner of ``checkpoint`` (a run or step folder);
    with ``attention_out`` (a .png) also draw each picture's attention strip there (several
    pictures: ``<stem>-<i>.png``).  Every argument is checked before the model is loaded."""
    check_search(beam, length_penalty)
    paths = attention_paths(attention_out, len(files)) if attention_out is not None else []
    with reading_errors(CheckpointError):
        captioner = ImageCaptioner.from_checkpoint(checkpoint, device=device)
    if paths and not captioner.has_attention:
        raise InputError(
            "this checkpoint is the no-attention baseline: it has no attention to plot; "
            "caption without attention_out",
            fields=("attention_out",),
        )
    with reading_errors(DataError):
        images = captioner.load_images(list(files))
    captions = captioner.caption(
        images, beam=beam, length_penalty=length_penalty, need_attention=bool(paths)
    )
    grid = captioner.model.config.grid
    strips = [
        plot_caption_attention(image, caption, path, grid=grid)
        for image, caption, path in zip(images, captions, paths, strict=False)
    ]
    strips += [None] * (len(captions) - len(strips))
    return [
        CaptionedFile(file, caption, strip)
        for file, caption, strip in zip(files, captions, strips, strict=True)
    ]
