"""A reader for SWORD "zText" Bible modules, written from the file format (no SWORD library).

A module keeps each testament (``ot`` / ``nt``) in three little-endian files:

- ``.bzs`` block index, 12 bytes per block: offset (u32), compressed size (u32) and
  uncompressed size (u32) of one zlib block inside ``.bzz``;
- ``.bzv`` entry index, 10 bytes per entry: block number (u32), offset inside the
  uncompressed block (u32), length (u16); length 0 means the entry has no text;
- ``.bzz`` the concatenated zlib blocks of UTF-8 OSIS markup.

Entry ``i`` is the ``i``-th slot of the module's versification (headings included);
mapping slots to books and verses is the caller's business (see ``qkv.data.bible``).
"""

from __future__ import annotations

import html
import re
import struct
import zlib
from pathlib import Path

from ..errors import DataError, InputError, MissingFileError

__all__ = ["SWORD_INSTALL_HINT", "TESTAMENTS", "read_ztext", "osis_to_text"]

SWORD_INSTALL_HINT = "apt-get install sword-text-kjv sword-text-sparv"
TESTAMENTS = ("ot", "nt")

_BLOCK_RECORD = struct.Struct("<III")  # offset, compressed size, uncompressed size
_ENTRY_RECORD = struct.Struct("<IIH")  # block number, offset in block, length


def _read_index(path: Path, record: struct.Struct, what: str) -> list[tuple[int, ...]]:
    data = path.read_bytes()
    if len(data) % record.size:
        raise DataError(
            f"truncated {what} {path}: {len(data)} bytes is not a multiple of the "
            f"{record.size}-byte record size"
        )
    return [record.unpack_from(data, start) for start in range(0, len(data), record.size)]


#: The largest decompressed block read (SWORD writes blocks of a few KiB to a few hundred).
MAX_BLOCK_BYTES = 16 * 1024**2


class _BlockStore:
    """The ``.bzz`` blocks of one testament, each decompressed once, on first use."""

    def __init__(self, bzz_path: Path, blocks: list[tuple[int, ...]]):
        self.path = bzz_path
        self.data = bzz_path.read_bytes()
        self.blocks = blocks
        self.cache: dict[int, bytes] = {}

    def __getitem__(self, number: int) -> bytes:
        if number not in self.cache:
            offset, compressed, uncompressed = self.blocks[number]
            if offset + compressed > len(self.data):
                raise DataError(
                    f"block {number} of {self.path} runs past the end of the file "
                    f"(offset {offset} + size {compressed} > {len(self.data)} bytes)"
                )
            if uncompressed > MAX_BLOCK_BYTES:
                raise DataError(
                    f"block {number} of {self.path} claims {uncompressed:,} bytes uncompressed, "
                    f"over the {MAX_BLOCK_BYTES:,} a SWORD block holds: a damaged module?"
                )
            try:  # never inflate past what the index promises (a zlib bomb stops there)
                inflater = zlib.decompressobj()
                raw = inflater.decompress(self.data[offset : offset + compressed], uncompressed + 1)
            except zlib.error as error:
                raise DataError(
                    f"bad zlib data in block {number} of {self.path}: {error}"
                ) from None
            if len(raw) != uncompressed:
                raise DataError(
                    f"block {number} of {self.path} decompressed to {len(raw)} bytes, "
                    f"but the block index says {uncompressed}"
                )
            self.cache[number] = raw
        return self.cache[number]


def read_ztext(module_dir: str | Path, testament: str) -> list[str]:
    """Every entry of one testament of a zText module, as raw OSIS markup ("" where empty).

    Raises MissingFileError when the module's files are missing, and DataError naming
    the file when an index is truncated, points outside its data, a block is not zlib or
    inflates to another size than its index says (checked before inflating).
    """
    if testament not in TESTAMENTS:
        raise InputError(f"testament={testament!r} must be one of {TESTAMENTS}")
    module_dir = Path(module_dir)
    paths = {ext: module_dir / f"{testament}.{ext}" for ext in ("bzs", "bzv", "bzz")}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise MissingFileError(
            f"SWORD zText module files not found: {', '.join(missing)}; "
            f"install the Bible modules with `{SWORD_INSTALL_HINT}` (as root)"
        )
    blocks = _read_index(paths["bzs"], _BLOCK_RECORD, "block index")
    entries = _read_index(paths["bzv"], _ENTRY_RECORD, "verse index")
    store = _BlockStore(paths["bzz"], blocks)

    texts = []
    for position, (block, offset, length) in enumerate(entries):
        if length == 0:
            texts.append("")
            continue
        if block >= len(blocks):
            raise DataError(
                f"entry {position} of {paths['bzv']} names block {block}, but "
                f"{paths['bzs']} has only {len(blocks)} blocks"
            )
        raw = store[block]
        if offset + length > len(raw):
            raise DataError(
                f"entry {position} of {paths['bzv']} (offset {offset}, length {length}) runs "
                f"past the end of block {block} ({len(raw)} bytes)"
            )
        try:
            texts.append(raw[offset : offset + length].decode("utf-8"))
        except UnicodeDecodeError as error:
            raise DataError(
                f"entry {position} in block {block} of {paths['bzz']} is not UTF-8: {error}"
            ) from None
    return texts


# Notes (footnotes, cross-references) are never verse text; titles are headings unless the
# caller knows better (a title inside a verse entry may be scripture, like a psalm's).
_NOTES = re.compile(r"<note\b[^>]*(?<!/)>.*?</note\s*>", re.DOTALL)
_TITLES = re.compile(r"<title\b[^>]*(?<!/)>.*?</title\s*>", re.DOTALL)
# Line, paragraph and division markers separate words; inline tags (<w>, <q>...) do not.
_SEPARATING_TAGS = re.compile(r"</?(?:l|lb|lg|p|div|chapter|milestone|br)\b[^>]*>")
_ANY_TAG = re.compile(r"<[^>]*>")
# USFM character markers the OSIS conversion left behind in a few verses, e.g. "\\nd LORD".
_USFM_MARKER = re.compile(r"\\\+?[a-z]+\d*\*?")
_WHITESPACE = re.compile(r"\s+")


def osis_to_text(markup: str, *, keep_titles: bool = False) -> str:
    """Plain text of an OSIS fragment: notes and (unless ``keep_titles``) titles dropped,
    tags stripped, entities unescaped, whitespace collapsed, and the KJV paragraph mark
    ``¶`` and stray USFM markers (``\\nd``) removed."""
    text = _NOTES.sub("", markup)
    if not keep_titles:
        text = _TITLES.sub("", text)
    text = _SEPARATING_TAGS.sub(" ", text)
    text = _ANY_TAG.sub("", text)
    text = _USFM_MARKER.sub("", text)
    text = html.unescape(text).replace("\u00b6", " ")
    return _WHITESPACE.sub(" ", text).strip()
