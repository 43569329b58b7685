"""Tokenizers: text <-> token ids, characters or BPE subwords, saved as one JSON file.

Every tokenizer reserves the same first four ids, ``SPECIAL_TOKENS`` of ``batch.py``:
PAD=0, BOS=1, EOS=2, UNK=3, so models, checkpoints and search agree whatever the kind.
``encode`` adds no BOS/EOS (the dataset does); ``decode`` skips all four special ids (an
unknown character therefore vanishes from decoded text; ``tokens`` shows it as ``<unk>``).

The default use is one *joint* vocabulary for source and target: train on both sides'
texts (``training_texts(pairs)``).
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from .batch import SPECIAL_TOKENS, UNK_ID, Pair

__all__ = [
    "Tokenizer",
    "CharTokenizer",
    "BPETokenizer",
    "train_tokenizer",
    "load_tokenizer",
    "training_texts",
    "TOKENIZER_KINDS",
    "register_tokenizer",
    "write_tokenizer_file",
]

_FILE_FORMAT = "qkv-tokenizer"
_FILE_VERSION = 1
#: How ``tokens`` shows a space: visible in plot labels, and the same mark BPE uses.
_WORD_MARK = "\u2581"


def training_texts(pairs: Iterable[Pair]) -> list[str]:
    """All source texts, then all target texts: what a joint vocabulary is trained on."""
    pairs = list(pairs)
    return [pair.source for pair in pairs] + [pair.target for pair in pairs]


def _id_list(ids: Iterable[int]) -> list[int]:
    """Accept a list, tuple or 1-D tensor / array of ids."""
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]


class Tokenizer(ABC):
    """The common interface. Subclasses set ``kind`` and implement the abstract methods."""

    kind: ClassVar[str]

    @classmethod
    @abstractmethod
    def train(cls, texts: Iterable[str], **options: Any) -> Tokenizer:
        """Build a tokenizer from training texts."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without BOS/EOS; unknown pieces become UNK_ID."""

    @abstractmethod
    def _decode(self, ids: list[int]) -> str: ...

    @abstractmethod
    def _token(self, token_id: int) -> str: ...

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, the four special ones included."""

    @abstractmethod
    def _state(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def _from_state(cls, state: dict[str, Any]) -> Tokenizer: ...

    def _checked(self, ids: Iterable[int]) -> list[int]:
        ids = _id_list(ids)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"token ids {bad[:5]} are outside this vocabulary (0..{self.vocab_size - 1})"
            )
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; special ids (PAD, BOS, EOS, UNK) are skipped."""
        return self._decode(self._checked(ids))

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """One readable string per id, for plot labels (a word start or space shows as '▁')."""
        return [self._token(i) for i in self._checked(ids)]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tokenizer as one JSON file (read it back with ``load_tokenizer``)."""
        write_tokenizer_file(path, self.kind, self._state())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class CharTokenizer(Tokenizer):
    """One id per character: ids 0..3 are special, then ``alphabet`` in order."""

    kind = "char"

    def __init__(self, alphabet: Sequence[str]):
        alphabet = list(alphabet)
        bad = [c for c in alphabet if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"alphabet entries must be single characters, got {bad[:5]}")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet holds a character twice")
        self.alphabet = alphabet
        self._ids = {c: i for i, c in enumerate(alphabet, start=len(SPECIAL_TOKENS))}

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int | None = None) -> CharTokenizer:
        """Collect the characters of ``texts``; with ``vocab_size``, keep only the most
        frequent ``vocab_size - 4`` of them (the rest become UNK)."""
        counts = Counter()
        for text in texts:
            counts.update(text)
        if not counts:
            raise ValueError("cannot train a tokenizer on no text (texts are empty)")
        if vocab_size is not None:
            if vocab_size <= len(SPECIAL_TOKENS):
                raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the 4 special ids")
            ranked = sorted(counts, key=lambda c: (-counts[c], c))
            counts = Counter({c: counts[c] for c in ranked[: vocab_size - len(SPECIAL_TOKENS)]})
        return cls(sorted(counts))

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(c, UNK_ID) for c in text]

    def _decode(self, ids: list[int]) -> str:
        first = len(SPECIAL_TOKENS)
        return "".join(self.alphabet[i - first] for i in ids if i >= first)

    def _token(self, token_id: int) -> str:
        if token_id < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[token_id]
        char = self.alphabet[token_id - len(SPECIAL_TOKENS)]
        return _WORD_MARK if char == " " else char

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.alphabet)

    def _state(self) -> dict[str, Any]:
        return {"alphabet": "".join(self.alphabet)}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> CharTokenizer:
        return cls(list(state["alphabet"]))


class BPETokenizer(Tokenizer):
    """Byte-pair-encoding subwords (Hugging Face ``tokenizers``), split at spaces.

    A metaspace pre-tokenizer marks each word start with '▁', so ``decode`` restores the
    spaces between words exactly (leading spaces are dropped); characters never seen in
    training, tabs and newlines included, become UNK.
    """

    kind = "bpe"

    def __init__(self, tokenizer: _HFTokenizer):
        for expected_id, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != expected_id:
                raise ValueError(
                    f"special token {token!r} has id {tokenizer.token_to_id(token)}, expected "
                    f"{expected_id}; train with special_tokens={list(SPECIAL_TOKENS)} first"
                )
        self._tokenizer = tokenizer

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2
    ) -> BPETokenizer:
        """Learn merges until ``vocab_size`` ids (fewer if the texts run out of pairs that
        occur ``min_frequency`` times); every character seen in ``texts`` gets an id."""
        texts = list(texts)
        if not any(texts):
            raise ValueError("cannot train a tokenizer on no text (texts are empty)")
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the 4 special ids")
        tokenizer = _HFTokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),  # first, so they get ids 0..3
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def _token(self, token_id: int) -> str:
        return self._tokenizer.id_to_token(token_id)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def _state(self) -> dict[str, Any]:
        return {"tokenizer": json.loads(self._tokenizer.to_str())}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> BPETokenizer:
        return cls(_HFTokenizer.from_str(json.dumps(state["tokenizer"])))


_KINDS: dict[str, type[Tokenizer]] = {"char": CharTokenizer, "bpe": BPETokenizer}
#: The tokenizer kinds ``train_tokenizer`` and ``load_tokenizer`` know.
TOKENIZER_KINDS = tuple(_KINDS)
_LOADABLE: dict[str, type[Tokenizer]] = {}  # kinds other packages register (register_tokenizer)


def write_tokenizer_file(path: str | os.PathLike[str], kind: str, state: dict[str, Any]) -> None:
    """Write a tokenizer's ``state`` as the one JSON file :func:`load_tokenizer` reads back
    (through the ``_from_state`` of the class registered for ``kind``)."""
    document = {"format": _FILE_FORMAT, "version": _FILE_VERSION, "kind": kind, **state}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False)


def register_tokenizer(tokenizer_class: type[Tokenizer]) -> None:
    """Let :func:`load_tokenizer` (and so every checkpoint) find ``tokenizer_class`` by its
    ``kind``; :func:`train_tokenizer` keeps to the translators' kinds (TOKENIZER_KINDS).
    A class from another package (a model folder's tokenizer) needs ``kind``, ``save`` and
    the classmethod ``_from_state`` only."""
    _LOADABLE[tokenizer_class.kind] = tokenizer_class


def train_tokenizer(kind: str, texts: Iterable[str], *, vocab_size: int = 8000) -> Tokenizer:
    """Train a "char" or "bpe" tokenizer on ``texts`` with at most ``vocab_size`` ids."""
    if kind not in _KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(_KINDS)}")
    return _KINDS[kind].train(texts, vocab_size=vocab_size)


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Read a tokenizer written by ``Tokenizer.save``, whatever its kind."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tokenizer file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a qkv tokenizer file: not valid JSON ({error})") from None
    # The captions' first vocabulary files hold {"kind": "words", "tokens": [...]} only.
    legacy_words = isinstance(document, dict) and document.get("kind") == "words"
    if not isinstance(document, dict) or (
        document.get("format") != _FILE_FORMAT and not legacy_words
    ):
        raise ValueError(f"{path} is not a qkv tokenizer file (no 'format': '{_FILE_FORMAT}')")
    kinds = {**_KINDS, **_LOADABLE}  # the captions' words register themselves on import
    kind = document.get("kind")
    if kind not in kinds:
        raise ValueError(f"{path} holds tokenizer kind {kind!r}; known: {', '.join(kinds)}")
    try:
        return kinds[kind]._from_state(document)
    except Exception as error:  # KeyError, TypeError, the HF parser's own exception
        raise ValueError(f"{path} is a corrupt {kind} tokenizer file: {error}") from None
