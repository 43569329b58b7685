"""A translation dataset: sentence pairs encoded once into token ids, ready to batch."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from ..errors import DataError, InputError
from .batch import BOS_ID, EOS_ID, Batch, Pair, collate
from .tokenizers import Tokenizer

__all__ = ["TranslationDataset"]


class TranslationDataset:
    """Pairs encoded with a source and a target tokenizer (often the same joint one).

    Example ``i`` is ``(source_ids, target_ids)``: the source without special ids, the
    target as ``[BOS] + ids + [EOS]``.

    Lengths are capped: a source keeps its first ``max_source_len`` ids; a target keeps
    ``BOS``, its first ``max_target_len - 2`` ids and ``EOS`` (``max_target_len`` counts
    both markers, and EOS is kept so the model still learns to stop). Truncation is
    reported with one ``warnings.warn`` for the whole dataset saying how many sources and
    targets were cut. A pair whose source or target encodes to no ids raises ValueError
    naming its index.
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        source_tokenizer: Tokenizer,
        target_tokenizer: Tokenizer,
        *,
        max_source_len: int = 256,
        max_target_len: int = 256,
    ):
        if max_source_len < 1:
            raise InputError(f"max_source_len={max_source_len} must be at least 1")
        if max_target_len < 3:
            raise InputError(
                f"max_target_len={max_target_len} must be at least 3 (BOS, a token, EOS)"
            )
        self.pairs = [Pair(*pair) for pair in pairs]
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_source_len = max_source_len
        self.max_target_len = max_target_len
        self.sources: list[list[int]] = []
        self.targets: list[list[int]] = []
        cut_sources = cut_targets = 0
        for index, (source, target) in enumerate(self.pairs):
            source_ids = source_tokenizer.encode(source)
            target_ids = target_tokenizer.encode(target)
            for side, ids, text in (("source", source_ids, source), ("target", target_ids, target)):
                if not ids:
                    raise DataError(
                        f"pair {index} has an empty {side} after tokenization ({text!r}); "
                        "remove it from the corpus"
                    )
            if len(source_ids) > max_source_len:
                source_ids = source_ids[:max_source_len]
                cut_sources += 1
            if len(target_ids) > max_target_len - 2:
                target_ids = target_ids[: max_target_len - 2]
                cut_targets += 1
            self.sources.append(source_ids)
            self.targets.append([BOS_ID, *target_ids, EOS_ID])
        if cut_sources or cut_targets:
            warnings.warn(
                f"truncated {cut_sources} of {len(self.pairs)} sources to max_source_len="
                f"{max_source_len} ids and {cut_targets} targets to max_target_len="
                f"{max_target_len} ids (BOS and EOS included)",
                stacklevel=2,
            )
        self.source_lengths = [len(ids) for ids in self.sources]
        self.target_lengths = [len(ids) for ids in self.targets]

    @property
    def lengths(self) -> list[int]:
        """Per example, the longer of source and target: the size to batch by."""
        return [max(s, t) for s, t in zip(self.source_lengths, self.target_lengths, strict=True)]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[list[int], list[int]]:
        return self.sources[index], self.targets[index]

    def collate(self, indices: Sequence[int]) -> Batch:
        """The examples at ``indices`` padded into a Batch (``Batch.index`` = ``indices``).

        Shapes: source (B, S), target (B, T), index (B,).
        """
        indices = list(indices)
        return collate(
            [self.sources[i] for i in indices], [self.targets[i] for i in indices], indices
        )
