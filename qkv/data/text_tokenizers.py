"""Tokenizers for plain text (language models): byte-level BPE, and strict prompt encoding.

Characters reuse :class:`~qkv.data.tokenizers.CharTokenizer` (newlines and every other
character of the training text get an id).  :class:`ByteBPETokenizer` is GPT-2's scheme:
text is read as UTF-8 bytes, so any string encodes without an unknown token and decodes back
exactly, spaces and newlines included.  Both keep qkv's four special ids first.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..errors import InputError
from .batch import SPECIAL_TOKENS, UNK_ID
from .tokenizers import BPETokenizer, CharTokenizer, Tokenizer, register_tokenizer

__all__ = ["ByteBPETokenizer", "TEXT_TOKENIZER_KINDS", "train_text_tokenizer", "encode_prompt"]


class ByteBPETokenizer(BPETokenizer):
    """Byte-level byte-pair encoding (Radford et al. 2019), trained with Hugging Face
    ``tokenizers``: the 256 bytes are the base alphabet, merges learned on top.

    ``decode(encode(text)) == text`` for every string (no UNK is ever produced).  Encoding,
    decoding and saving are :class:`~qkv.data.tokenizers.BPETokenizer`'s; only the
    pre-tokenizer (bytes, spaces kept) and the training differ."""

    kind = "bytebpe"

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = 4096, min_frequency: int = 2
    ) -> ByteBPETokenizer:
        """Learn merges until ``vocab_size`` ids (4 special + 256 bytes + merges)."""
        texts = list(texts)
        if not any(texts):
            raise InputError("cannot train a tokenizer on no text (texts are empty)")
        floor = len(SPECIAL_TOKENS) + 256
        if vocab_size < floor:
            raise InputError(
                f"vocab_size={vocab_size} is too small for byte-level BPE: it needs at least "
                f"{floor} ids (4 special + 256 bytes)"
            )
        tokenizer = _HFTokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),  # first, so they get ids 0..3
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    def encode_lines(self, lines: list[str]) -> list[list[int]]:
        """``encode`` of many texts at once (in parallel threads)."""
        return [e.ids for e in self._tokenizer.encode_batch(lines, add_special_tokens=False)]


# ``load_tokenizer`` (and so every checkpoint) finds the kind by name.
register_tokenizer(ByteBPETokenizer)

#: The tokenizer kinds a language model trains with.
TEXT_TOKENIZER_KINDS = ("char", "bytebpe")


def train_text_tokenizer(kind: str, text: str, *, vocab_size: int = 4096) -> Tokenizer:
    """A "char" tokenizer (every character of ``text``) or a "bytebpe" one of ``vocab_size``
    ids, trained on ``text``."""
    if kind == "char":
        return CharTokenizer.train([text])
    if kind == "bytebpe":
        return ByteBPETokenizer.train(text.splitlines(keepends=True), vocab_size=vocab_size)
    raise InputError(f"unknown text tokenizer {kind!r}; choose one of {TEXT_TOKENIZER_KINDS}")


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids of a prompt, refusing characters the tokenizer cannot represent (a character
    tokenizer has ids only for the characters of its training text) and empty prompts."""
    if not text:
        raise InputError("the prompt is empty: give at least one character", fields=("prompt",))
    ids = tokenizer.encode(text)
    if isinstance(tokenizer, Tokenizer) and UNK_ID in ids:  # qkv's own reserve id 3 for UNK
        if isinstance(tokenizer, CharTokenizer):
            unknown = sorted({c for c in text if tokenizer.encode(c) == [UNK_ID]})
        else:
            unknown = ["(pieces encoded as <unk>)"]
        raise InputError(
            f"the prompt holds characters this {tokenizer.kind} tokenizer never saw in "
            f"training: {''.join(unknown)!r}; remove them, or train with tokenizer='bytebpe', "
            "which encodes any text",
            fields=("prompt",),
        )
    if not ids:
        raise InputError(f"the prompt {text!r} encodes to no tokens")
    return ids
