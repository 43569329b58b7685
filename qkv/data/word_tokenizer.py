"""The captions' tokenizer: whole words, as the captioning data gives them.

It has the interface of every qkv tokenizer (``qkv.data.tokenizers``), so a captioner's
vocabulary is saved in a checkpoint and read back by ``load_tokenizer`` like a translator's.
``qkv.data.captions.WordVocab`` is the captioning code's view of the same words as lists.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from .batch import SPECIAL_TOKENS, UNK_ID
from .tokenizers import Tokenizer, register_tokenizer

__all__ = ["WordTokenizer"]


class WordTokenizer(Tokenizer):
    """Whole words split at whitespace (the captions' lowercase words): ids 0..3 are special,
    then ``words`` in order; unknown words become UNK.  ``decode`` joins words with spaces."""

    kind = "words"

    def __init__(self, words: Sequence[str]):
        words = list(words)
        bad = [w for w in words if not isinstance(w, str) or not w or w.split() != [w]]
        if bad or set(words) & set(SPECIAL_TOKENS) or len(set(words)) != len(words):
            raise ValueError(
                f"words must be unique non-empty strings without spaces, none of "
                f"{SPECIAL_TOKENS}; got {(bad or words)[:5]}"
            )
        self.words = words
        self._ids = {w: i for i, w in enumerate(words, start=len(SPECIAL_TOKENS))}

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int | None = None, min_count: int = 1
    ) -> WordTokenizer:
        """Words seen at least ``min_count`` times, most frequent first (ties alphabetical);
        ``vocab_size`` caps the ids, the four special ones included."""
        counts = Counter(word for text in texts for word in text.split())
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted(
            (w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w)
        )
        if vocab_size is not None:
            ranked = ranked[: max(vocab_size - len(SPECIAL_TOKENS), 0)]
        return cls(ranked)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(word, UNK_ID) for word in text.split()]

    def _decode(self, ids: list[int]) -> str:
        first = len(SPECIAL_TOKENS)
        return " ".join(self.words[i - first] for i in ids if i >= first)

    def _token(self, token_id: int) -> str:
        first = len(SPECIAL_TOKENS)
        return SPECIAL_TOKENS[token_id] if token_id < first else self.words[token_id - first]

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.words)

    def _state(self) -> dict[str, Any]:
        return {"words": self.words}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> WordTokenizer:
        if "words" not in state and "tokens" in state:
            # the captioner's first vocabulary files: {"kind": "words", "tokens": [specials,
            # words...]}, without "format"
            if tuple(state["tokens"][: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
                raise ValueError(f"the tokens do not start with {SPECIAL_TOKENS}")
            return cls(state["tokens"][len(SPECIAL_TOKENS) :])
        return cls(state["words"])


register_tokenizer(WordTokenizer)  # so load_tokenizer (every checkpoint) finds kind 'words'
