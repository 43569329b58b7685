"""Image captioning data in one format, whatever its source: a caption example, a word
vocabulary, a dataset of (image, caption ids) items and the collate that batches them.

Images are float tensors (3, H, W) in [0, 1], RGB, square (see ``qkv.data.scenes`` and
``qkv.data.karpathy``); an encoder pretrained on ImageNet standardises them itself
(``qkv.layers.cnn``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import Dataset

from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, Batch, pad_sequences
from qkv.errors import DataError

from .tokenizers import Tokenizer
from .word_tokenizer import WordTokenizer

__all__ = [
    "remember_images",
    "CaptionExample",
    "CaptionItem",
    "WordVocab",
    "CaptionDataset",
    "collate_captions",
    "CaptionTrainingData",
]


@dataclass(frozen=True)
class CaptionExample:
    """One image and its reference captions.

    ``captions`` are lowercase word lists, ``raw`` the same captions as text. ``image``
    loads (or draws) the picture on access: a float tensor (3, S, S) in [0, 1].
    Generated scenes also carry ``objects`` (``qkv.data.scenes.SceneObject``) and, per
    caption, ``grounding``: word position (0-based, in ``captions[i]``) -> index into
    ``objects`` of the object that word names.
    """

    image_id: str
    captions: list[list[str]]
    raw: list[str]
    load_image: Callable[[], Tensor] = field(repr=False, compare=False)
    objects: tuple = ()
    grounding: tuple[dict[int, int], ...] = ()

    @property
    def image(self) -> Tensor:
        """Shapes: (3, S, S) float in [0, 1]."""
        return self.load_image()


class WordVocab:
    """Caption words <-> ids; ids 0-3 are the shared specials <pad> <s> </s> <unk>."""

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"a WordVocab starts with the special tokens {SPECIAL_TOKENS}, "
                f"got {list(tokens[: len(SPECIAL_TOKENS)])}"
            )
        if len(set(tokens)) != len(tokens):
            raise ValueError("WordVocab tokens must be unique")
        self.tokens = list(tokens)
        self.index = {token: position for position, token in enumerate(self.tokens)}

    @classmethod
    def build(
        cls, captions: Iterable[Sequence[str]], *, min_count: int = 1, max_size: int | None = None
    ) -> WordVocab:
        """Words seen at least ``min_count`` times, most frequent first (ties alphabetical);
        ``max_size`` caps the whole vocabulary, the four specials included."""
        if min_count < 1:
            raise ValueError(f"min_count={min_count} must be at least 1")
        if max_size is not None and max_size <= len(SPECIAL_TOKENS):
            raise ValueError(
                f"max_size={max_size} must exceed the {len(SPECIAL_TOKENS)} special tokens"
            )
        counts = Counter(word for caption in captions for word in caption)
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        words = sorted(
            (w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w)
        )
        if max_size is not None:
            words = words[: max_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *words])

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Word ids, unknown words -> UNK_ID (no <s> / </s> added)."""
        return [self.index.get(token, UNK_ID) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Words up to the first </s>; <pad> and <s> are skipped, unknowns read "<unk>"."""
        words = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if not 0 <= token_id < len(self.tokens):
                raise ValueError(f"id {token_id} is outside the vocabulary of {len(self)} words")
            if token_id not in (PAD_ID, BOS_ID):
                words.append(self.tokens[token_id])
        return words

    def save(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps({"kind": "words", "tokens": self.tokens}, ensure_ascii=False)
        )

    def to_tokenizer(self) -> WordTokenizer:
        """The same words as a qkv tokenizer (what a checkpoint stores and loads)."""
        return WordTokenizer(self.tokens[len(SPECIAL_TOKENS) :])

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> WordVocab:
        """The vocabulary of a :class:`WordTokenizer` (ids unchanged)."""
        if not isinstance(tokenizer, WordTokenizer):
            raise DataError(
                f"a caption vocabulary is a 'words' tokenizer, got a {tokenizer.kind!r} one"
            )
        return cls([*SPECIAL_TOKENS, *tokenizer.words])

    @classmethod
    def load(cls, path: str | Path) -> WordVocab:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not a WordVocab JSON file: {error}") from None
        if not isinstance(data, dict) or data.get("kind") != "words" or "tokens" not in data:
            raise ValueError(
                f'{path} is not a WordVocab file (expected {{"kind": "words", "tokens": [...]}})'
            )
        return cls(data["tokens"])


class CaptionItem(NamedTuple):
    """image: (3, S, S); caption: ids <s> w_1 .. w_n </s>; index: the example's position."""

    image: Tensor
    caption: list[int]
    index: int


class CaptionDataset(Dataset):
    """Items (image, caption ids, example index) for a captioning model.

    With ``per_caption=True`` (training) there is one item per (image, caption) pair; with
    ``per_caption=False`` (evaluation) one item per image, whose target is its first caption
    and whose references are ``references(index)``. Captions longer than
    ``max_caption_len`` words are cut there before <s> and </s> are added.
    """

    def __init__(
        self,
        examples: Sequence[CaptionExample],
        vocab: WordVocab,
        *,
        max_caption_len: int = 20,
        per_caption: bool = True,
    ):
        if max_caption_len < 1:
            raise ValueError(f"max_caption_len={max_caption_len} must be at least 1")
        empty = [position for position, e in enumerate(examples) if not e.captions]
        if empty:
            raise ValueError(f"examples {empty[:5]} have no captions")
        self.examples = list(examples)
        self.vocab = vocab
        self.max_caption_len = max_caption_len
        self.per_caption = per_caption
        if per_caption:
            self.items = [
                (i, j) for i, e in enumerate(self.examples) for j in range(len(e.captions))
            ]
        else:
            self.items = [(i, 0) for i in range(len(self.examples))]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, position: int) -> CaptionItem:
        example_index, caption_index = self.items[position]
        example = self.examples[example_index]
        words = example.captions[caption_index][: self.max_caption_len]
        return CaptionItem(
            example.image, [BOS_ID, *self.vocab.encode(words), EOS_ID], example_index
        )

    def references(self, index: int) -> list[list[str]]:
        """Every reference caption (word lists) of example ``index`` (a ``Batch.index`` entry)."""
        return self.examples[index].captions


def collate_captions(items: Sequence[CaptionItem]) -> Batch:
    """Stack images into ``Batch.source`` (B, 3, H, W) and pad captions into ``Batch.target``
    (B, T) with PAD_ID; ``Batch.index`` holds the example indices."""
    if not items:
        raise ValueError("cannot collate an empty list of caption items")
    shapes = {tuple(item.image.shape) for item in items}
    if len(shapes) != 1:
        raise ValueError(f"images in one batch must share a shape, got {sorted(shapes)}")
    images = torch.stack([item.image for item in items])
    captions = pad_sequences([item.caption for item in items])
    return Batch(
        images, captions, torch.as_tensor([item.index for item in items], dtype=torch.long)
    )


#: Decoded training images are kept in memory (as bytes) up to this many bytes.
IMAGE_CACHE_BYTES = 2 * 1024**3


class CaptionTrainingData:
    """A :class:`~qkv.data.captions.CaptionDataset` in the form the trainer reads: one item
    per (image, caption) pair, its lengths (an image counts as ``num_regions`` positions, a
    caption as its ids with ``<s>`` and ``</s>``) and ``collate``.

    Shapes: ``collate`` -> Batch with source (B, 3, S, S), target (B, T)."""

    def __init__(self, dataset: CaptionDataset, *, num_regions: int):
        self.dataset = dataset
        cut = dataset.max_caption_len
        self.target_lengths = [
            min(len(dataset.examples[image].captions[caption]), cut) + 2
            for image, caption in dataset.items
        ]
        self.source_lengths = [num_regions] * len(self.target_lengths)

    def __len__(self) -> int:
        return len(self.target_lengths)

    def collate(self, indices: Sequence[int]) -> Batch:
        return collate_captions([self.dataset[i] for i in indices])


class _ImageMemory:
    """Keeps decoded images (as uint8 when that is exact) so later epochs skip the decoding."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.used = max_bytes, 0
        self.images: dict[int, Tensor] = {}

    def load(self, index: int, loader: Callable[[], Tensor]) -> Tensor:
        stored = self.images.get(index)
        if stored is not None:
            return stored.float().div_(255.0) if stored.dtype == torch.uint8 else stored
        image = loader()
        as_bytes = (image * 255.0).round_().clamp_(0, 255).to(torch.uint8)
        exact = torch.equal(as_bytes.float().div_(255.0), image)
        keep = as_bytes if exact else image
        size = keep.numel() * keep.element_size()
        if self.used + size <= self.max_bytes:
            self.images[index], self.used = keep, self.used + size
        return image


def remember_images(
    examples: Sequence[CaptionExample], *, max_bytes: int = IMAGE_CACHE_BYTES
) -> list[CaptionExample]:
    """The same examples, whose images are decoded once and then kept in memory (up to
    ``max_bytes``; images past that are decoded on every access, as before)."""
    memory = _ImageMemory(max_bytes)
    return [
        dataclasses.replace(e, load_image=functools.partial(memory.load, i, e.load_image))
        for i, e in enumerate(examples)
    ]
