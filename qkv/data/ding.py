"""German -> English example sentences from the Ding dictionary (Debian package ``trans-de-en``).

The dictionary file has one entry per line, ``German side :: English side``. Each side holds
sub-entries separated by `` | ``, aligned by position; within a sub-entry ``;`` separates
variants. Most sub-entries are words and phrases, but about 18.6k are whole example
sentences, modern and idiomatic (``Das Problem sind die Nachbarn.`` -> ``The problem is the
neighbours.``). This module extracts those:

1. drop ``#`` comment lines and strip the annotations ``{...}`` (grammar: ``{m}``, ``{pl}``),
   ``[...]`` (usage: ``[coll.]``, ``[Br.]``) and ``<...>`` (cross-references);
2. keep a line only when both sides have the same number of sub-entries, pair them by
   position, and take the first variant of each;
3. keep a pair when both sides are sentences: they start with an upper-case letter, end in
   ``.``, ``?`` or ``!``, and the English side has at least 4 words;
4. drop duplicate pairs.

The split is seeded and fixed: 1,000 test pairs, 1,000 valid pairs, the rest train. Pairs
that share a German or an English sentence stay in the same split, so no test sentence is
seen in training.
"""

from __future__ import annotations

import os
import random
import re
from functools import lru_cache

from ..errors import InputError, MissingFileError
from .batch import Pair

__all__ = ["ding_de_en", "parse_ding", "DING_PATH", "DING_HELD_OUT_SIZE"]

DING_PATH = "/usr/share/trans/de-en"
#: Pairs in each of the test and valid splits.
DING_HELD_OUT_SIZE = 1_000

_ANNOTATION = re.compile(r"\s*(?:\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>)")
_SENTENCE_END = (".", "?", "!")
_MIN_ENGLISH_WORDS = 4


def _first_variant(sub_entry: str) -> str:
    return " ".join(sub_entry.split(";", 1)[0].split())


def _is_sentence(text: str) -> bool:
    return bool(text) and text[0].isupper() and text.endswith(_SENTENCE_END)


@lru_cache(maxsize=2)
def _parse(path: str, modified: float) -> tuple[Pair, ...]:
    pairs: dict[Pair, None] = {}  # ordered and deduplicated
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            german, english = line.rstrip("\n").split(" :: ", 1)
            german_entries, english_entries = german.split(" | "), english.split(" | ")
            if len(german_entries) != len(english_entries):
                continue
            for german_entry, english_entry in zip(german_entries, english_entries, strict=True):
                # cheap test first: most sub-entries are words and phrases, not sentences
                if english_entry.count(" ") < _MIN_ENGLISH_WORDS - 1:
                    continue
                # strip annotations before splitting variants: "{was, were; been}" holds a ';'
                source = _first_variant(_ANNOTATION.sub("", german_entry))
                target = _first_variant(_ANNOTATION.sub("", english_entry))
                if (
                    _is_sentence(source)
                    and _is_sentence(target)
                    and len(target.split()) >= _MIN_ENGLISH_WORDS
                ):
                    pairs[Pair(source, target)] = None
    return tuple(pairs)


def parse_ding(path: str = DING_PATH) -> list[Pair]:
    """All example-sentence pairs of the Ding file at ``path``, deduplicated, in file order.

    The parse is cached per process (keyed by path and modification time).
    """
    if not os.path.isfile(path):
        raise MissingFileError(
            f"the Ding German-English dictionary is not at {path!r}; install it with "
            "`apt-get install trans-de-en` (Debian/Ubuntu, as root) or pass its path"
        )
    return list(_parse(path, os.path.getmtime(path)))


def _find(parent: dict[str, str], key: str) -> str:
    while parent[key] != key:
        parent[key] = parent[parent[key]]
        key = parent[key]
    return key


def _groups(pairs: tuple[Pair, ...]) -> list[list[int]]:
    """Indices of pairs grouped so that pairs sharing a source or a target are together."""
    parent: dict[str, str] = {}
    for source, target in pairs:
        source_key, target_key = "de:" + source, "en:" + target
        parent.setdefault(source_key, source_key)
        parent.setdefault(target_key, target_key)
        parent[_find(parent, source_key)] = _find(parent, target_key)
    groups: dict[str, list[int]] = {}
    for index, (source, _) in enumerate(pairs):
        groups.setdefault(_find(parent, "de:" + source), []).append(index)
    return list(groups.values())


@lru_cache(maxsize=4)
def _split(path: str, modified: float, seed: int) -> dict[str, tuple[Pair, ...]]:
    pairs = _parse(path, modified)
    groups = _groups(pairs)
    random.Random(seed).shuffle(groups)
    chosen: dict[str, list[int]] = {"test": [], "valid": [], "train": []}
    for group in groups:
        # fill test, then valid, to exactly DING_HELD_OUT_SIZE; a group that would
        # overshoot goes to the next split with room (train takes everything else)
        for split in ("test", "valid", "train"):
            room = DING_HELD_OUT_SIZE - len(chosen[split])
            if split == "train" or len(group) <= room:
                chosen[split].extend(group)
                break
    # keep file order inside each split: the shuffle only decides membership
    return {split: tuple(pairs[i] for i in sorted(indices)) for split, indices in chosen.items()}


def ding_de_en(split: str, *, path: str = DING_PATH, seed: int = 0) -> list[Pair]:
    """German -> English sentence pairs of the Ding dictionary for ``split``.

    ``split`` is "train" (about 16.6k pairs), "valid" (1,000) or "test" (1,000). The file
    is parsed once per process; a missing file raises FileNotFoundError saying how to
    install it.
    """
    if split not in ("train", "valid", "test"):
        raise InputError(f"unknown split {split!r} for ding-de-en; use train, valid or test")
    parse_ding(path)  # raises the helpful FileNotFoundError, warms the cache
    return list(_split(path, os.path.getmtime(path), seed)[split])
