"""English-Spanish Bible verse pairs: the KJV and the Reina-Valera 1909, from Debian's SWORD
modules (``apt-get install sword-text-kjv sword-text-sparv``; both public domain).

Both modules use the KJV versification, so entry ``i`` of one testament is the same verse
in both. Each testament's index holds, in order: a module heading and a testament heading,
then for every book a book heading followed, for every chapter, by a chapter heading and
the chapter's verses. Heading entries carry only titles and are skipped; titles inside
verse entries are scripture (psalm superscriptions, the "ב BETH." of Psalm 119, epistle
subscriptions) that the RV1909 carries as plain verse text, so they are kept.

Splits hold out whole books, so no test verse has a near-duplicate parallel passage from
its own book in training: ``test`` is Ruth, Esther, Daniel, Jonah, Mark, Romans and Hebrews
(2,070 pairs), ``valid`` is Judges, Joel, Galatians, Philippians and James (1,052 pairs),
``train`` is the other 54 books (27,962 pairs).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import NamedTuple

from qkv.data.batch import Pair
from qkv.data.ztext import TESTAMENTS, osis_to_text, read_ztext

from ..errors import DataError, InputError

__all__ = [
    "SWORD_ZTEXT_DIR",
    "ENGLISH_MODULE",
    "SPANISH_MODULE",
    "BOOKS",
    "BOOK_NAMES",
    "TEST_BOOKS",
    "VALID_BOOKS",
    "SPLITS",
    "BibleVerse",
    "kjv_slots",
    "bible_verses",
    "english_verses",
    "load_bible_en_es",
]

SWORD_ZTEXT_DIR = Path("/usr/share/sword/modules/texts/ztext")
ENGLISH_MODULE = "engKJV2006eb"
SPANISH_MODULE = "spaRV1909eb"

# KJV versification: "OSIS id|English name|verses in chapter 1, 2, ..."; indented lines
# continue the line above. Checked against the chapter markers of the KJV module
# (tests/test_bible.py): 39 + 27 books, 929 + 260 chapters, 23,145 + 7,957 verses.
_KJV_TABLE = """
Gen|Genesis|31 25 24 26 32 22 24 22 29 32 32 20 18 24 21 16 27 33 38 18 34 24 20 67 34 35 46 22
   35 43 55 32 20 31 29 43 36 30 23 23 57 38 34 34 28 34 31 22 33 26
Exod|Exodus|22 25 22 31 23 30 25 32 35 29 10 51 22 31 27 36 16 27 25 26 36 31 33 18 40 37 21 43
   46 38 18 35 23 35 35 38 29 31 43 38
Lev|Leviticus|17 16 17 35 19 30 38 36 24 20 47 8 59 57 33 34 16 30 37 27 24 33 44 23 55 46 34
Num|Numbers|54 34 51 49 31 27 89 26 23 36 35 16 33 45 41 50 13 32 22 29 35 41 30 25 18 65 23 31
   40 16 54 42 56 29 34 13
Deut|Deuteronomy|46 37 29 49 33 25 26 20 29 22 32 32 18 29 23 22 20 22 21 20 23 30 25 22 19 19
   26 68 29 20 30 52 29 12
Josh|Joshua|18 24 17 24 15 27 26 35 27 43 23 24 33 15 63 10 18 28 51 9 45 34 16 33
Judg|Judges|36 23 31 24 31 40 25 35 57 18 40 15 25 20 20 31 13 31 30 48 25
Ruth|Ruth|22 23 18 22
1Sam|1 Samuel|28 36 21 22 12 21 17 22 27 27 15 25 23 52 35 23 58 30 24 42 15 23 29 22 44 25 12
   25 11 31 13
2Sam|2 Samuel|27 32 39 12 25 23 29 18 13 19 27 31 39 33 37 23 29 33 43 26 22 51 39 25
1Kgs|1 Kings|53 46 28 34 18 38 51 66 28 29 43 33 34 31 34 34 24 46 21 43 29 53
2Kgs|2 Kings|18 25 27 44 27 33 20 29 37 36 21 21 25 29 38 20 41 37 37 21 26 20 37 20 30
1Chr|1 Chronicles|54 55 24 43 26 81 40 40 44 14 47 40 14 17 29 43 27 17 19 8 30 19 32 31 31 32
   34 21 30
2Chr|2 Chronicles|17 18 17 22 14 42 22 18 31 19 23 16 22 15 19 14 19 34 11 37 20 12 21 27 28 23
   9 27 36 27 21 33 25 33 27 23
Ezra|Ezra|11 70 13 24 17 22 28 36 15 44
Neh|Nehemiah|11 20 32 23 19 19 73 18 38 39 36 47 31
Esth|Esther|22 23 15 17 14 14 10 17 32 3
Job|Job|22 13 26 21 27 30 21 22 35 22 20 25 28 22 35 22 16 21 29 29 34 30 17 25 6 14 23 28 25
   31 40 22 33 37 16 33 24 41 30 24 34 17
Ps|Psalms|6 12 8 8 12 10 17 9 20 18 7 8 6 7 5 11 15 50 14 9 13 31 6 10 22 12 14 9 11 12 24 11
   22 22 28 12 40 22 13 17 13 11 5 26 17 11 9 14 20 23 19 9 6 7 23 13 11 11 17 12 8 12 11 10 13
   20 7 35 36 5 24 20 28 23 10 12 20 72 13 19 16 8 18 12 13 17 7 18 52 17 16 15 5 23 11 13 12 9
   9 5 8 28 22 35 45 48 43 13 31 7 10 10 9 8 18 19 2 29 176 7 8 9 4 8 5 6 5 6 8 8 3 18 3 3 21
   26 9 8 24 13 10 7 12 15 21 10 20 14 9 6
Prov|Proverbs|33 22 35 27 23 35 27 36 18 32 31 28 25 35 33 33 28 24 29 30 31 29 35 34 28 28 27
   28 27 33 31
Eccl|Ecclesiastes|18 26 22 16 20 12 29 17 18 20 10 14
Song|Song of Solomon|17 17 11 16 16 13 13 14
Isa|Isaiah|31 22 26 6 30 13 25 22 21 34 16 6 22 32 9 14 14 7 25 6 17 25 18 23 12 21 13 29 24 33
   9 20 24 17 10 22 38 22 8 31 29 25 28 28 25 13 15 22 26 11 23 15 12 17 13 12 21 14 21 22 11
   12 19 12 25 24
Jer|Jeremiah|19 37 25 31 31 30 34 22 26 25 23 17 27 22 21 21 27 23 15 18 14 30 40 10 38 24 22
   17 32 24 40 44 26 22 19 32 21 28 18 16 18 22 13 30 5 28 7 47 39 46 64 34
Lam|Lamentations|22 22 66 22 22
Ezek|Ezekiel|28 10 27 17 17 14 27 18 11 22 25 28 23 23 8 63 24 32 14 49 32 31 49 27 17 21 36 26
   21 26 18 32 33 31 15 38 28 23 29 49 26 20 27 31 25 24 23 35
Dan|Daniel|21 49 30 37 31 28 28 27 27 21 45 13
Hos|Hosea|11 23 5 19 15 11 16 14 17 15 12 14 16 9
Joel|Joel|20 32 21
Amos|Amos|15 16 15 13 27 14 17 14 15
Obad|Obadiah|21
Jonah|Jonah|17 10 10 11
Mic|Micah|16 13 12 13 15 16 20
Nah|Nahum|15 13 19
Hab|Habakkuk|17 20 19
Zeph|Zephaniah|18 15 20
Hag|Haggai|15 23
Zech|Zechariah|21 13 10 14 11 15 14 23 17 12 17 14 9 21
Mal|Malachi|14 17 18 6
Matt|Matthew|25 23 17 25 48 34 29 34 38 42 30 50 58 36 39 28 27 35 30 34 46 46 39 51 46 75 66
   20
Mark|Mark|45 28 35 41 43 56 37 38 50 52 33 44 37 72 47 20
Luke|Luke|80 52 38 44 39 49 50 56 62 42 54 59 35 35 32 31 37 43 48 47 38 71 56 53
John|John|51 25 36 54 47 71 53 59 41 42 57 50 38 31 27 33 26 40 42 31 25
Acts|Acts|26 47 26 37 42 15 60 40 43 48 30 25 52 28 41 40 34 28 41 38 40 30 35 27 27 32 44 31
Rom|Romans|32 29 31 25 21 23 25 39 33 21 36 21 14 23 33 27
1Cor|1 Corinthians|31 16 23 21 13 20 40 13 27 33 34 31 13 40 58 24
2Cor|2 Corinthians|24 17 18 18 21 18 16 24 15 18 33 21 14
Gal|Galatians|24 21 29 31 26 18
Eph|Ephesians|23 22 21 32 33 24
Phil|Philippians|30 30 21 23
Col|Colossians|29 23 25 18
1Thess|1 Thessalonians|10 20 13 18 28
2Thess|2 Thessalonians|12 17 18
1Tim|1 Timothy|20 15 16 16 25 21
2Tim|2 Timothy|18 26 17 22
Titus|Titus|16 15 15
Phlm|Philemon|25
Heb|Hebrews|14 18 19 16 14 20 28 13 28 39 40 29 25
Jas|James|27 26 18 17 20
1Pet|1 Peter|25 25 22 19 14
2Pet|2 Peter|21 22 18
1John|1 John|10 29 24 21 21
2John|2 John|13
3John|3 John|14
Jude|Jude|25
Rev|Revelation|20 29 22 11 14 17 17 13 21 11 19 17 18 20 8 21 18 24 21 15 27 21
"""


def _parse_table(table: str) -> list[tuple[str, str, tuple[int, ...]]]:
    lines: list[str] = []
    for line in table.strip().splitlines():
        if line.startswith(" "):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    books = []
    for line in lines:
        osis_id, name, counts = line.split("|")
        books.append((osis_id, name, tuple(int(count) for count in counts.split())))
    return books


_KJV = _parse_table(_KJV_TABLE)
#: OSIS ids of the 66 books in canonical order (39 Old Testament, then 27 New Testament).
BOOKS: tuple[str, ...] = tuple(osis_id for osis_id, _, _ in _KJV)
BOOK_NAMES: dict[str, str] = {osis_id: name for osis_id, name, _ in _KJV}
_VERSE_COUNTS = {osis_id: counts for osis_id, _, counts in _KJV}
_TESTAMENT_BOOKS = {"ot": BOOKS[:39], "nt": BOOKS[39:]}

TEST_BOOKS = ("Ruth", "Esth", "Dan", "Jonah", "Mark", "Rom", "Heb")
VALID_BOOKS = ("Judg", "Joel", "Gal", "Phil", "Jas")
SPLITS = ("train", "valid", "test")


class BibleVerse(NamedTuple):
    """One verse in both languages ("" where a module has no text for it)."""

    book: str  # OSIS id, e.g. "John"; see BOOK_NAMES
    chapter: int
    verse: int
    en: str
    es: str


def kjv_slots(testament: str) -> list[tuple[str, int, int]]:
    """What each index entry of a KJV-versified testament holds, as (book, chapter, verse):
    ("", 0, 0) for the module and testament headings, (book, 0, 0) for a book heading,
    (book, chapter, 0) for a chapter heading, and verses numbered from 1."""
    if testament not in TESTAMENTS:
        raise InputError(f"testament={testament!r} must be one of {TESTAMENTS}")
    slots = [("", 0, 0), ("", 0, 0)]
    for book in _TESTAMENT_BOOKS[testament]:
        slots.append((book, 0, 0))
        for chapter, count in enumerate(_VERSE_COUNTS[book], start=1):
            slots.append((book, chapter, 0))
            slots.extend((book, chapter, verse) for verse in range(1, count + 1))
    return slots


# The RV1909 module often writes two words as adjacent elements with no space between
# them ("<w>compraron</w><w>drogas</w>"), except where the second is an enclitic pronoun
# ("<w>oyéndo</w><transChange>lo</transChange>"): separate all but those.
_ADJACENT_WORDS = re.compile(
    r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b[^>]*>"
    r"(?!(?:me|te|se|nos|os|lo|la|le|los|las|les)+(?:<|\W)))"
)


def _module_texts(module_dir: Path, testament: str, slots: list) -> list[str]:
    entries = read_ztext(module_dir, testament)
    if len(entries) != len(slots):
        raise DataError(
            f"{module_dir}/{testament}.bzv has {len(entries)} entries, but the KJV "
            f"versification needs {len(slots)}: is the module KJV-versified?"
        )
    return [osis_to_text(_ADJACENT_WORDS.sub(r"\1 ", entry), keep_titles=True) for entry in entries]


@functools.lru_cache(maxsize=4)
def _all_verses(sword_dir: Path) -> tuple[BibleVerse, ...]:
    verses = []
    for testament in TESTAMENTS:
        slots = kjv_slots(testament)
        english = _module_texts(sword_dir / ENGLISH_MODULE, testament, slots)
        spanish = _module_texts(sword_dir / SPANISH_MODULE, testament, slots)
        for (book, chapter, verse), en, es in zip(slots, english, spanish, strict=True):
            if verse > 0:
                verses.append(BibleVerse(book, chapter, verse, en, es))
    return tuple(verses)


def _in_split(book: str, split: str) -> bool:
    if split == "test":
        return book in TEST_BOOKS
    if split == "valid":
        return book in VALID_BOOKS
    return book not in TEST_BOOKS and book not in VALID_BOOKS


def bible_verses(
    split: str | None = None, *, sword_dir: str | Path | None = None
) -> list[BibleVerse]:
    """All 31,102 KJV verse slots (or those of one split's books), in canonical order,
    with the English and Spanish text of each; read once per process.

    Raises FileNotFoundError (with the apt-get line) when the modules are not installed."""
    if split is not None and split not in SPLITS:
        raise InputError(f"split={split!r} must be one of {SPLITS} (or None for all)")
    verses = _all_verses(Path(sword_dir) if sword_dir is not None else SWORD_ZTEXT_DIR)
    return [verse for verse in verses if split is None or _in_split(verse.book, split)]


@functools.lru_cache(maxsize=4)
def _english_only(sword_dir: Path) -> tuple[tuple[str, str], ...]:
    verses = []
    for testament in TESTAMENTS:
        slots = kjv_slots(testament)
        english = _module_texts(sword_dir / ENGLISH_MODULE, testament, slots)
        verses += [(book, en) for (book, _, verse), en in zip(slots, english, strict=True) if verse]
    return tuple(verses)


def english_verses(split: str | None = None, *, sword_dir: str | Path | None = None) -> list[str]:
    """The English text of ``bible_verses(split)``, in the same order, without reading the
    Spanish module (what a language model on `kjv` reads: half the decoding)."""
    if split is not None and split not in SPLITS:
        raise InputError(f"split={split!r} must be one of {SPLITS} (or None for all)")
    verses = _english_only(Path(sword_dir) if sword_dir is not None else SWORD_ZTEXT_DIR)
    return [en for book, en in verses if split is None or _in_split(book, split)]


def load_bible_en_es(
    split: str, *, max_words: int | None = None, sword_dir: str | Path | None = None
) -> list[Pair]:
    """English (KJV) -> Spanish (RV1909) verse pairs of one split, in canonical order.

    Verses empty in either language are skipped (31,084 pairs in all). With ``max_words``,
    only pairs whose both sides have at most that many whitespace-separated words are kept.
    """
    if split not in SPLITS:
        raise InputError(f"split={split!r} must be one of {SPLITS}")
    if max_words is not None and max_words < 1:
        raise InputError(f"max_words={max_words} must be a positive number of words (or None)")
    pairs = []
    for verse in bible_verses(split, sword_dir=sword_dir):
        if not verse.en or not verse.es:
            continue
        if max_words is not None and max(len(verse.en.split()), len(verse.es.split())) > max_words:
            continue
        pairs.append(Pair(verse.en, verse.es))
    return pairs
