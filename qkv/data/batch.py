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
    "NO_PAD_ID",
    "SPECIAL_TOKENS",
    "Batch",
    "pad_sequences",
    "collate",
]

#: Every qkv tokenizer reserves the same four ids, so checkpoints, models and search agree.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
#: The padding of a stream whose every id is a token: no id at all (PyTorch's ignore_index).
NO_PAD_ID = -100


class Pair(NamedTuple):
    """One example of a parallel corpus: a source sentence and its translation."""

    source: str
    target: str


@dataclass
class Batch:
    """source: (B, S) token ids padded with PAD_ID, or (B, C, H, W) images.
    target: (B, T) ids ``<s> w_1 .. w_n </s>`` padded with ``pad_id``.
    index: (B,) the examples' positions in their dataset (to find references).
    pad_id: what fills ``target`` past each example's end, never a target of the loss:
        PAD_ID, or for a stream in which every id is a token (a pretrained model's
        vocabulary, whose id 0 is a word) NO_PAD_ID, which the decoder reads as id 0."""

    source: Tensor
    target: Tensor
    index: Tensor
    pad_id: int = PAD_ID

    @property
    def target_input(self) -> Tensor:
        """(B, T-1): what the decoder reads under teacher forcing."""
        inputs = self.target[:, :-1]
        if self.pad_id < 0:  # padding comes after an example's tokens, so no token sees it
            inputs = inputs.clamp(min=0)
        return inputs

    @property
    def target_output(self) -> Tensor:
        """(B, T-1): what it must predict, shifted by one."""
        return self.target[:, 1:]

    @property
    def num_target_tokens(self) -> int:
        return int((self.target_output != self.pad_id).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.source.to(device), self.target.to(device), self.index.to(device), self.pad_id
        )


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
