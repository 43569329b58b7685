"""Plain text for language models: the built-in ``kjv`` corpus, any UTF-8 file, and the
dataset that cuts a token stream into fixed-length training windows.

Train/valid split rules (stated, deterministic):

- ``kjv``: the King James Bible, one verse per line, in canonical order, read from Debian's
  ``sword-text-kjv`` by :mod:`qkv.data.bible`.  Validation is the books bible.py holds out for
  validation (Judges, Joel, Galatians, Philippians, James); its test books are left out.
- a file: the last 5% of its lines (at least one) are validation; a file of fewer than 20
  lines has no validation split.

Documents, for packed training (:func:`split_documents`):

- ``kjv``: every verse is a document (one line of the text).  The text carries no chapter
  marks, and a verse (about 130 characters) is short beside any training window, so packing
  actually packs.
- a file: every paragraph is a document: a run of lines separated from the next by one or
  more blank lines (lines holding only whitespace, which are dropped).  A file with no blank
  line is one document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import DataError, InputError, MissingFileError
from .batch import NO_PAD_ID, PAD_ID, Batch

__all__ = [
    "TextCorpus",
    "TEXT_CORPORA",
    "load_text",
    "split_documents",
    "TextDataset",
    "VALID_FRACTION",
]

#: Built-in text corpora.
TEXT_CORPORA = ("kjv",)
#: The share of a file's lines (its last ones) held out for validation.
VALID_FRACTION = 0.05
_MIN_LINES_FOR_VALID = 20


@dataclass(frozen=True)
class TextCorpus:
    """The training and validation text of a corpus ("" when it has no validation)."""

    name: str
    train: str
    valid: str


def load_text(name_or_path: str) -> TextCorpus:
    """``kjv`` or the path of a UTF-8 text file, split by the rules in the module docstring."""
    if name_or_path == "kjv":
        return _kjv()
    path = Path(name_or_path)
    if not path.exists():
        raise MissingFileError(
            f"data={name_or_path!r} is neither a built-in corpus {TEXT_CORPORA} nor a file",
            fields=("data",),
        )
    if not path.is_file():
        raise DataError(
            f"data={name_or_path!r} is a folder; give a UTF-8 text file", fields=("data",)
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path} is not UTF-8 text (byte {error.start} cannot be decoded); convert it "
            "with iconv, or give another file"
        ) from None
    if not text.strip():
        raise DataError(f"{path} holds no text")
    lines = text.splitlines(keepends=True)
    if len(lines) < _MIN_LINES_FOR_VALID:
        return TextCorpus(str(path), text, "")
    held_out = max(1, round(len(lines) * VALID_FRACTION))
    return TextCorpus(str(path), "".join(lines[:-held_out]), "".join(lines[-held_out:]))


def _kjv() -> TextCorpus:
    from .bible import english_verses

    def join(split: str) -> str:
        return "".join(text + "\n" for text in english_verses(split) if text)

    return TextCorpus("kjv", join("train"), join("valid"))


def split_documents(corpus: TextCorpus, text: str) -> list[str]:
    """The documents of ``text`` (one of ``corpus``'s splits), by the rules in the module
    docstring: verses for ``kjv``, blank-line-separated paragraphs for a file.  Each document
    keeps its own line breaks; empty ones are dropped."""
    lines = text.splitlines(keepends=True)
    if corpus.name == "kjv":
        return [line for line in lines if line.strip()]
    documents, current = [], []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            documents.append("".join(current))
            current = []
    if current:
        documents.append("".join(current))
    return documents


class TextDataset:
    """A token stream cut into windows of ``context + 1`` tokens, each starting ``context``
    tokens after the previous one (neighbours share one token), so every token but the first
    is predicted exactly once per epoch.  The last window may be shorter (padded in batches).
    A batch is one gather from the stream (no per-window Python work).

    A window is a trainer example with no source and the window as target: the model reads
    ``target[:, :-1]`` and predicts ``target[:, 1:]`` (:class:`~qkv.data.batch.Batch`).
    ``pad_id`` fills the short last window and is no target of the loss: PAD_ID (0), which
    the stream must not contain (qkv's tokenizers reserve it), or NO_PAD_ID for a stream in
    which every id is a token (a pretrained model's tokenizer: its id 0 is a word).

    Shapes: collate -> Batch(source (B, 0), target (B, context + 1), index (B,)).
    """

    def __init__(self, ids: Sequence[int] | torch.Tensor, *, context: int, pad_id: int = PAD_ID):
        if not isinstance(context, int) or context < 1:
            raise InputError(f"context={context!r} must be a positive number of tokens")
        self.ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if self.ids.numel() < 2:
            raise DataError(
                f"the text has {self.ids.numel()} token(s); a language model needs at least 2"
            )
        if pad_id not in (PAD_ID, NO_PAD_ID):
            raise InputError(f"pad_id={pad_id!r} must be PAD_ID (0) or NO_PAD_ID (-100)")
        if bool((self.ids == pad_id).any()):
            raise DataError(f"the token stream contains id {pad_id}, reserved for padding")
        self.context, self.pad_id = context, pad_id
        self.starts = list(range(0, self.ids.numel() - 1, context))
        self.target_lengths = [min(context + 1, self.ids.numel() - start) for start in self.starts]
        self.source_lengths = [0] * len(self.starts)
        self._starts = torch.tensor(self.starts, dtype=torch.long)
        self._lengths = torch.tensor(self.target_lengths, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> torch.Tensor:
        start = self.starts[index]
        return self.ids[start : start + self.target_lengths[index]]

    def collate(self, indices: Sequence[int]) -> Batch:
        index = torch.as_tensor(indices, dtype=torch.long)
        if index.numel() == 0:
            raise ValueError("cannot collate an empty list of windows")
        lengths = self._lengths[index]  # (B,)
        offsets = torch.arange(int(lengths.max()))  # (T,)
        positions = self._starts[index, None] + offsets  # (B, T)
        target = self.ids[positions.clamp(max=self.ids.numel() - 1)]
        target = target.masked_fill(offsets >= lengths[:, None], self.pad_id)  # the short last one
        return Batch(target.new_zeros((len(index), 0)), target, index, self.pad_id)
