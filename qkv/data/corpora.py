"""The corpus registry: a name or a path -> sentence pairs of one split.

``load_corpus`` accepts:

- a built-in name (``available_corpora()``):
  ``dates`` (generated human-written dates -> ISO, char-level, no files),
  ``lengths`` (generated sentences of 5-80 words for the length study, no files),
  ``ding-de-en`` (German -> English sentences, Debian ``trans-de-en``),
  ``bible-en-es`` (English -> Spanish Bible verses, Debian ``sword-text-kjv`` and
  ``sword-text-sparv``); each has fixed ``train``, ``valid`` and ``test`` splits;
- a path to a ``.tsv`` file of ``source<TAB>target`` lines;
- two line-aligned text files joined by a comma: ``"train.de,train.en"`` (source first).

A path may contain the placeholder ``{split}``, replaced by the split name, so one argument
names all splits: ``"data/{split}.tsv"`` or ``"data/{split}.de,data/{split}.en"``. A path
without the placeholder has no splits: it returns the whole file for every split (so give
a separate validation file, or use ``{split}``, to validate on held-out data).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import InputError
from .batch import Pair
from .dates import dates_corpus
from .ding import ding_de_en
from .lengths import lengths_corpus
from .readers import read_parallel, read_tsv

__all__ = [
    "load_corpus",
    "available_corpora",
    "default_tokenizer_kind",
    "corpus_description",
    "SPLITS",
]

SPLITS = ("train", "valid", "test")


def _load_bible(split: str) -> list[Pair]:
    from .bible import load_bible_en_es  # imported lazily: it reads SWORD modules

    return load_bible_en_es(split)


_CORPORA: dict[str, tuple[Callable[[str], list[Pair]], str]] = {
    "dates": (
        dates_corpus,
        "human-written dates -> ISO 8601 (generated; 20,000/1,000/1,000 pairs)",
    ),
    "ding-de-en": (
        ding_de_en,
        "German -> English example sentences of the Ding dictionary (about 18.6k pairs; "
        "apt-get install trans-de-en)",
    ),
    "bible-en-es": (
        _load_bible,
        "English (KJV) -> Spanish (Reina-Valera 1909) Bible verses (about 31k pairs; "
        "apt-get install sword-text-kjv sword-text-sparv)",
    ),
    "lengths": (
        lengths_corpus,
        "a made-up language pair with 5-80-word sentences evenly over the length buckets, "
        "a 500+ word lexicon, adjective-noun swap and verb-final clauses (generated; "
        "20,000/500/1,000 pairs)",
    ),
}


def available_corpora() -> list[str]:
    """The names ``load_corpus`` knows, besides file paths."""
    return list(_CORPORA)


def corpus_description(name: str) -> str:
    """One line saying what the built-in corpus ``name`` holds and where it comes from."""
    _check_name(name)
    return _CORPORA[name][1]


def _check_name(name: str) -> None:
    if name not in _CORPORA:
        raise InputError(
            f"unknown corpus {name!r}: use one of {', '.join(_CORPORA)}, a path to a .tsv file "
            "(source<TAB>target lines), or two aligned text files as 'SOURCE_PATH,TARGET_PATH'"
        )


def _looks_like_path(name: str) -> bool:
    return name.endswith(".tsv") or "," in name or os.sep in name or os.path.exists(name)


def load_corpus(name_or_path: str, split: str = "train") -> list[Pair]:
    """Sentence pairs of ``split`` ("train", "valid" or "test") of a named corpus or file(s).

    See the module docstring for the accepted forms; a file without ``{split}`` in its path
    returns all its pairs whatever ``split`` is.
    """
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    if name_or_path in _CORPORA:
        return _CORPORA[name_or_path][0](split)
    if not _looks_like_path(name_or_path):
        _check_name(name_or_path)
    path = name_or_path.replace("{split}", split)
    if "," in path:
        parts = path.split(",")
        if len(parts) != 2 or not all(parts):
            raise InputError(
                f"{name_or_path!r}: aligned files are given as 'SOURCE_PATH,TARGET_PATH' "
                f"(exactly one comma), got {len(parts)} parts"
            )
        return read_parallel(parts[0], parts[1])
    if not path.endswith(".tsv"):
        raise InputError(
            f"{name_or_path!r}: a single corpus file must be a .tsv file of source<TAB>target "
            "lines; give two aligned text files as 'SOURCE_PATH,TARGET_PATH'"
        )
    return read_tsv(path)


def default_tokenizer_kind(name_or_path: str) -> str:
    """The tokenizer kind to train by default: "char" for dates (a few dozen symbols), else "bpe"."""
    return "char" if name_or_path == "dates" else "bpe"
