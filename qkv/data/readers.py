"""Read a user's parallel corpus from disk: one TSV file, or two line-aligned text files.

Both readers are strict: a malformed line is an error naming ``file:line`` and what was
found there, never a silently skipped example (a skipped line in one of two aligned files
would shift every later pair). Each side is stripped of surrounding whitespace; Windows line
ends and a UTF-8 byte-order mark are accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..errors import DataError, MissingFileError
from .batch import Pair

__all__ = ["read_tsv", "read_parallel", "MAX_CORPUS_BYTES"]

#: The largest corpus file read (its pairs are held in memory, several times the file's
#: size); a larger one is refused before reading, with this limit named.
MAX_CORPUS_BYTES = 2 * 1024**3


def _preview(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Yield (line number from 1, decoded line without its line end) for a UTF-8 file."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
        raise MissingFileError(f"corpus file {path!r} {what}")
    size = os.path.getsize(path)
    if size > MAX_CORPUS_BYTES:
        raise DataError(
            f"corpus file {path} holds {size:,} bytes, over the {MAX_CORPUS_BYTES:,} that qkv "
            "reads into memory; split it, or raise "
            "qkv.data.readers.MAX_CORPUS_BYTES if the machine has the memory"
        )
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path}:{number}: not valid UTF-8 (byte {raw[error.start]:#04x} at column "
                    f"{error.start + 1}); re-encode the file as UTF-8, e.g. with iconv"
                ) from None
            if "\x00" in line:
                raise DataError(
                    f"{path}:{number}: a NUL byte: this looks like a binary file, not UTF-8 text"
                )
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.rstrip("\r\n")


def read_tsv(path: str | os.PathLike[str]) -> list[Pair]:
    """Read ``source<TAB>target`` lines (UTF-8) into pairs.

    Every line must hold exactly one TAB with text on both sides; a blank line, a line
    without a TAB (or with several), or an empty side raises DataError naming ``file:line``.
    A missing file raises MissingFileError (a FileNotFoundError); an empty, binary or
    larger than ``MAX_CORPUS_BYTES`` file raises DataError.
    """
    pairs = []
    for number, line in _lines(path):
        tabs = line.count("\t")
        if tabs != 1:
            found = "a blank line" if not line.strip() else f"{tabs} TABs in {_preview(line)}"
            raise DataError(
                f"{os.fspath(path)}:{number}: expected 'source<TAB>target' with exactly one TAB, "
                f"found {found}"
            )
        source, target = (side.strip() for side in line.split("\t"))
        for side, text in (("source", source), ("target", target)):
            if not text:
                raise DataError(
                    f"{os.fspath(path)}:{number}: the {side} side is empty in {_preview(line)}"
                )
        pairs.append(Pair(source, target))
    if not pairs:
        raise DataError(f"{os.fspath(path)} holds no lines; expected 'source<TAB>target' lines")
    return pairs


def _read_sentences(path: str | os.PathLike[str]) -> list[str]:
    sentences = []
    for number, line in _lines(path):
        text = line.strip()
        if not text:
            raise DataError(
                f"{os.fspath(path)}:{number}: empty line; every line must hold one sentence "
                "(aligned files cannot skip lines)"
            )
        sentences.append(text)
    return sentences


def read_parallel(
    source_path: str | os.PathLike[str], target_path: str | os.PathLike[str]
) -> list[Pair]:
    """Read two line-aligned UTF-8 text files (line i of one translates line i of the other).

    An empty line raises DataError naming ``file:line``; files with different numbers of
    lines raise DataError naming both counts. A missing file raises MissingFileError.
    """
    sources = _read_sentences(source_path)
    targets = _read_sentences(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"aligned files differ in length: {os.fspath(source_path)} has {len(sources)} lines, "
            f"{os.fspath(target_path)} has {len(targets)}"
        )
    if not sources:
        raise DataError(f"{os.fspath(source_path)} and {os.fspath(target_path)} are empty")
    return [Pair(source, target) for source, target in zip(sources, targets, strict=True)]
