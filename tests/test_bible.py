"""The zText reader on modules written here, and the KJV / RV1909 corpus built on it."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import pytest

from qkv.data.batch import Pair
from qkv.data.bible import (
    BOOKS,
    ENGLISH_MODULE,
    SPANISH_MODULE,
    SPLITS,
    SWORD_ZTEXT_DIR,
    TEST_BOOKS,
    VALID_BOOKS,
    bible_verses,
    english_verses,
    kjv_slots,
    load_bible_en_es,
)
from qkv.data.ztext import osis_to_text, read_ztext

needs_modules = pytest.mark.skipif(
    not all(
        (SWORD_ZTEXT_DIR / name / "nt.bzv").is_file() for name in (ENGLISH_MODULE, SPANISH_MODULE)
    ),
    reason="SWORD modules absent: apt-get install sword-text-kjv sword-text-sparv",
)


def write_ztext(directory: Path, testament: str, blocks: list[list[str]]) -> None:
    """A zText testament: each block is a list of entries; an entry "" gets length 0."""
    bzs, bzv, bzz = bytearray(), bytearray(), bytearray()
    for number, entries in enumerate(blocks):
        raw = b""
        for entry in entries:
            data = entry.encode()
            bzv += struct.pack("<IIH", number, len(raw) if data else 0, len(data))
            raw += data
        packed = zlib.compress(raw)
        bzs += struct.pack("<III", len(bzz), len(packed), len(raw))
        bzz += packed
    directory.mkdir(parents=True, exist_ok=True)
    for ext, data in (("bzs", bzs), ("bzv", bzv), ("bzz", bzz)):
        (directory / f"{testament}.{ext}").write_bytes(bytes(data))


BLOCKS = [
    ["", "<milestone/>", "In the <w>beginning</w>."],
    ["Jesus wept.", "", "¶ Amen &amp; amen"],
]


def test_read_synthetic_module(tmp_path):
    write_ztext(tmp_path, "nt", BLOCKS)
    assert read_ztext(tmp_path, "nt") == [entry for block in BLOCKS for entry in block]


def test_osis_to_text_hand_written():
    markup = (
        '<div type="x-p"/><title type="main">Heading</title>¶ The <w lemma="x">LORD</w>'
        '<note placement="foot"><reference>1.1 </reference>Heb. note</note> is &lt;good&gt;;'
        '<l level="1"/>the \\nd <divineName>LORD</divineName>’s <transChange>own</transChange>\n  word.'
    )
    assert osis_to_text(markup) == "The LORD is <good>; the LORD’s own word."
    assert (
        osis_to_text(markup, keep_titles=True) == "Heading The LORD is <good>; the LORD’s own word."
    )


def test_missing_module_names_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install sword-text-kjv sword-text-sparv"):
        read_ztext(tmp_path / "absent", "ot")
    with pytest.raises(ValueError, match="testament"):
        read_ztext(tmp_path, "apocrypha")


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "nt.bzv").write_bytes((d / "nt.bzv").read_bytes()[:-3]),
            r"nt\.bzv.*multiple of",
        ),
        (
            lambda d: (d / "nt.bzs").write_bytes((d / "nt.bzs").read_bytes()[:-1]),
            r"nt\.bzs.*multiple of",
        ),
        (
            lambda d: (d / "nt.bzz").write_bytes(b"\x00" * 200),
            r"bad zlib data in block 0 of .*nt\.bzz",
        ),
        (
            lambda d: (d / "nt.bzz").write_bytes((d / "nt.bzz").read_bytes()[:10]),
            r"past the end of the file",
        ),
        (
            lambda d: (d / "nt.bzv").write_bytes(struct.pack("<IIH", 7, 0, 4)),
            r"names block 7, but .*nt\.bzs has only 2 blocks",
        ),
        (
            lambda d: (d / "nt.bzv").write_bytes(struct.pack("<IIH", 0, 30, 100)),
            r"entry 0 of .*nt\.bzv .*runs past the end of block 0",
        ),
    ],
    ids=["truncated-bzv", "truncated-bzs", "bad-zlib", "short-bzz", "bad-block", "bad-offset"],
)
def test_corrupt_module_raises_value_error(tmp_path, damage, message):
    write_ztext(tmp_path, "nt", BLOCKS)
    damage(tmp_path)
    with pytest.raises(ValueError, match=message):
        read_ztext(tmp_path, "nt")


def test_slot_layout_counts():
    # 2 testament headings + books + chapters + verses (KJV: 39/929/23,145 and 27/260/7,957).
    assert len(kjv_slots("ot")) == 2 + 39 + 929 + 23145
    assert len(kjv_slots("nt")) == 2 + 27 + 260 + 7957
    assert kjv_slots("ot")[:5] == [
        ("", 0, 0),
        ("", 0, 0),
        ("Gen", 0, 0),
        ("Gen", 1, 0),
        ("Gen", 1, 1),
    ]
    assert kjv_slots("nt")[-1] == ("Rev", 22, 21)


@needs_modules
@pytest.mark.parametrize("module", [ENGLISH_MODULE, SPANISH_MODULE])
def test_versification_table_matches_the_modules_markers(module):
    """Every book and chapter heading the table predicts is where the module marks one."""
    for testament in ("ot", "nt"):
        entries = read_ztext(SWORD_ZTEXT_DIR / module, testament)
        slots = kjv_slots(testament)
        assert len(entries) == len(slots)
        chapter_starts = [
            index for index, entry in enumerate(entries) if re.search(r"<chapter [^>]*sID=", entry)
        ]
        predicted = [
            index for index, (_, chapter, verse) in enumerate(slots) if chapter and not verse
        ]
        assert chapter_starts == predicted
        for index in predicted:
            book, chapter, _ = slots[index]
            assert f'osisID="{book}.{chapter}"' in entries[index]
        for index, (book, chapter, _) in enumerate(slots):
            if book and not chapter:
                assert re.search(rf'<div [^>]*osisID="{book}" sID=[^>]*type="book"', entries[index])


@needs_modules
def test_known_verses():
    verses = {(v.book, v.chapter, v.verse): v for v in bible_verses()}
    assert len(verses) == 31102
    genesis, john = verses["Gen", 1, 1], verses["John", 3, 16]
    assert genesis.en == "In the beginning God created the heaven and the earth."
    assert genesis.es == "EN el principio crió Dios los cielos y la tierra."
    assert john.en == (
        "For God so loved the world, that he gave his only begotten Son, that whosoever "
        "believeth in him should not perish, but have everlasting life."
    )
    assert john.es == (
        "Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito, para que "
        "todo aquel que en él cree, no se pierda, mas tenga vida eterna."
    )
    assert verses["Rev", 22, 21].en == "The grace of our Lord Jesus Christ be with you all. Amen."
    # Psalm titles are scripture and kept on both sides; RV1909's glued words are separated.
    assert verses["Ps", 3, 1].en.startswith("A Psalm of David, when he fled from Absalom")
    assert verses["Ps", 3, 1].es.startswith("Salmo de David, cuando huía de delante de Absalom")
    assert "enviada por medio de Febe" in verses["Rom", 16, 27].es
    assert not any("¶" in v.en or "<" in v.en or "\\" in v.en for v in verses.values())


@needs_modules
def test_pairs_and_book_disjoint_splits():
    splits = {split: load_bible_en_es(split) for split in SPLITS}
    assert sum(len(pairs) for pairs in splits.values()) == 31084
    assert 1500 <= len(splits["test"]) <= 2500 and 900 <= len(splits["valid"]) <= 1200
    assert isinstance(splits["train"][0], Pair)
    books = {split: {v.book for v in bible_verses(split)} for split in SPLITS}
    assert books["test"] == set(TEST_BOOKS) and books["valid"] == set(VALID_BOOKS)
    assert not books["train"] & books["test"] and not books["train"] & books["valid"]
    assert books["train"] | books["valid"] | books["test"] == set(BOOKS)
    assert not set(splits["train"]) & set(splits["test"])
    short = load_bible_en_es("valid", max_words=12)
    assert 0 < len(short) < len(splits["valid"])
    assert all(len(p.source.split()) <= 12 and len(p.target.split()) <= 12 for p in short)
    with pytest.raises(ValueError, match="split='dev'"):
        load_bible_en_es("dev")


def _bomb(directory: Path, claimed: int) -> None:
    """Block 0 holds 50 MB of zeros compressed to ~50 KB, its index claiming ``claimed``."""
    packed = zlib.compress(b"\x00" * 50_000_000)
    (directory / "nt.bzs").write_bytes(struct.pack("<III", 0, len(packed), claimed))
    (directory / "nt.bzv").write_bytes(struct.pack("<IIH", 0, 0, 4))
    (directory / "nt.bzz").write_bytes(packed)


def test_a_zlib_bomb_is_not_inflated(tmp_path):
    from qkv.errors import DataError

    _bomb(tmp_path, claimed=100)  # honest-looking index: inflating stops after 101 bytes
    with pytest.raises(DataError, match="decompressed to 101 bytes, but the block index says 100"):
        read_ztext(tmp_path, "nt")
    _bomb(tmp_path, claimed=50_000_000)  # an index that admits it: refused before inflating
    with pytest.raises(DataError, match="claims 50,000,000 bytes uncompressed"):
        read_ztext(tmp_path, "nt")


@needs_modules
def test_the_english_text_alone_is_the_english_of_every_verse():
    for split in (None, *SPLITS):
        assert english_verses(split) == [verse.en for verse in bible_verses(split)]
