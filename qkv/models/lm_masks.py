"""The language model's attention patterns beyond plain causal: the sliding window and packed
documents, as a block mask for the flex kernel or as a boolean mask.

Positions here are absolute: queries at ``offset .. offset + T - 1``; keys at ``first ..
offset + T - 1`` (``first`` > 0 once a rolling KV cache dropped older keys).

- sliding window W: query i sees key j iff ``0 <= i - j < W``;
- packed documents: a token id (``document_start``, qkv's ``<s>``) opens every document of a
  packed window; query i sees key j iff ``start(i) <= j <= i``, where ``start(i)`` is the
  position of the latest opening at or before i (the window's first position when the window
  began inside a document), and the token's position inside its document is
  ``i - start(i)``.  With a window too, both conditions hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from qkv.functional.block_mask import BlockMask, and_masks, create_block_mask
from qkv.functional.patterns import causal, document, sliding_window

__all__ = ["Documents", "find_documents", "attention_masks"]


@dataclass(frozen=True)
class Documents:
    """Where each token's document starts, and its position inside it.
    Shapes: starts (B, T) absolute positions; positions (B, T) = own position - start."""

    starts: Tensor
    positions: Tensor


def find_documents(ids: Tensor, opener: int, *, offset: int, origin: Tensor) -> Documents:
    """The documents of ``ids`` (B, T) at positions offset.., each opened by the token
    ``opener``; ``origin`` (B,): the start of the document still open before ``ids`` (0 for
    a sequence's first tokens)."""
    absolute = torch.arange(offset, offset + ids.shape[1], device=ids.device)  # (T,)
    marks = torch.where(ids == opener, absolute, origin[:, None].to(absolute))  # (B, T)
    starts = marks.cummax(dim=1).values  # the latest opening at or before each token
    return Documents(starts, absolute - starts)


def attention_masks(
    *,
    length: int,
    offset: int,
    first: int,
    window: int | None,
    documents: Documents | None,
    device: torch.device,
    dense: bool,
) -> tuple[Tensor | None, BlockMask | None]:
    """The mask of ``length`` queries at offset.. over the keys first..offset+length-1, for
    a window and/or documents (at least one given): a boolean mask (1 or B, 1, Tq, Tk) when
    ``dense`` (the weights are wanted, or a decoding call), else a block mask for the flex
    kernel (whose blocks outside the pattern are skipped).  Causal in both cases."""
    end = offset + length
    if documents is not None and offset:  # the starts index the queries, not the held keys
        dense = True
    if dense:
        queries = torch.arange(offset, end, device=device)[:, None]  # (Tq, 1)
        keys = torch.arange(first, end, device=device)  # (Tk,)
        rule = causal if window is None else sliding_window(window)  # the one window rule
        keep = rule(None, None, queries, keys)  # (Tq, Tk)
        if documents is not None:
            keep = keep & (keys >= documents.starts[:, :, None])  # (B, Tq, Tk)
        return keep.view(-1, 1, length, end - first), None
    base = causal if window is None else sliding_window(window)
    shift = offset - first
    if shift:  # queries counted from the first key held: the block mask's indices are 0..

        def shifted(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return base(b, h, q_idx + shift, kv_idx)

        mask_mod = shifted
    else:
        mask_mod = base
    batch = None
    if documents is not None:  # offset = first = 0 here: the starts index the keys too
        mask_mod = and_masks(mask_mod, document(documents.starts))
        batch = documents.starts.shape[0]
    return None, create_block_mask(mask_mod, batch, None, length, end - first, device)
