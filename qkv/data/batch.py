"""Examples and batches: a sentence pair, and how token-id examples are padded into a batch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = [
    "Pair",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "SPECIAL_TOKENS",
    "Batch",
    "pad_sequences",
    "collate",
]

#: Every qkv tokenizer reserves the same four ids, so checkpoints, models and search agree.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


class Pair(NamedTuple):
    """One example of a parallel corpus: a source sentence and its translation."""

    source: str
    target: str


@dataclass
class Batch:
    """source: (B, S) token ids padded with PAD_ID, or (B, C, H, W) images.
    target: (B, T) ids ``<s> w_1 .. w_n </s>`` padded with PAD_ID.
    index: (B,) the examples' positions in their dataset (to find references)."""

    source: Tensor
    target: Tensor
    index: Tensor

    @property
    def target_input(self) -> Tensor:
        """(B, T-1): what the decoder reads under teacher forcing."""
        return self.target[:, :-1]

    @property
    def target_output(self) -> Tensor:
        """(B, T-1): what it must predict, shifted by one."""
        return self.target[:, 1:]

    @property
    def num_target_tokens(self) -> int:
        return int((self.target_output != PAD_ID).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.source.to(device), self.target.to(device), self.index.to(device))


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> Tensor:
    """Right-pad lists of ids into a (B, Tmax) long tensor."""
    if not sequences:
        raise ValueError("cannot pad an empty list of sequences")
    longest = max(len(s) for s in sequences)
    # padded in Python and made one tensor: a third of the time of a copy per row
    return torch.tensor(
        [[*s, *([pad_id] * (longest - len(s)))] for s in sequences], dtype=torch.long
    )


def collate(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], indices: Sequence[int]
) -> Batch:
    """Pad token-id sources and targets (targets already carry <s> ... </s>) into a Batch."""
    return Batch(
        pad_sequences(sources), pad_sequences(targets), torch.as_tensor(indices, dtype=torch.long)
    )
