"""The tiles of :mod:`.chunked_kernel`: (n, T, D) views of head groups, the key blocks a
block of query rows visits (the causal skip), the reused tile buffer, the appended column
of ones, and the user's mask applied to one tile of base-2 scores."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import Tensor

LOG2E, LN2 = math.log2(math.e), math.log(2.0)


class _Group(NamedTuple):
    """A batch/head range whose tensors view as (n, T, D) without copying."""

    batches: slice
    heads: slice
    size: int


def _flat(tensor: Tensor, group: _Group) -> Tensor:
    """(B, H, T, D) -> the group's (n, T, D) view."""
    part = tensor[group.batches, group.heads]
    return part.view(group.size, *part.shape[2:])


def _key_blocks(
    rows: slice, key_len: int, block: int, causal: bool, offset: int, device: torch.device
) -> Iterator[tuple[slice, Tensor | None]]:
    """The key blocks query ``rows`` may see: (cols, causal blocked (bq, bk) or None).

    Causal (end-aligned): row i sees key j iff j <= i + offset, offset = Tk - Tq.  Blocks
    entirely above the diagonal are skipped; blocks entirely below need no causal mask.
    """
    for k0 in range(0, key_len, block):
        cols = slice(k0, min(k0 + block, key_len))
        if not causal or cols.stop - 1 <= rows.start + offset:
            yield cols, None
        elif cols.start <= rows.stop - 1 + offset:
            row_limit = torch.arange(rows.start, rows.stop, device=device)[:, None] + offset
            yield cols, torch.arange(cols.start, cols.stop, device=device)[None, :] > row_limit


def _tile(buffer: Tensor, group: _Group, rows: slice, cols: slice) -> Tensor:
    """A (n, bq, bk) view at the start of a reused flat buffer."""
    shape = (group.size, rows.stop - rows.start, cols.stop - cols.start)
    return buffer[: shape[0] * shape[1] * shape[2]].view(shape)


def _with_ones(tensor: Tensor) -> Tensor:
    """(n, T, D) -> (n, T, D + 1), a column of ones appended."""
    return torch.cat([tensor, tensor.new_ones(*tensor.shape[:-1], 1)], -1)


def _accumulate(total: Tensor | None, left: Tensor, right: Tensor) -> Tensor:
    """total + left @ right, batched; the first product is written, not added to zeros."""
    return torch.bmm(left, right) if total is None else total.baddbmm_(left, right)


class _Mask(NamedTuple):
    """The user's mask as the kernel applies it: ``blocked`` (bool, True = may NOT attend)
    or ``bias`` (float), each a stride-0 expanded view to (B, H, Tq, Tk)."""

    blocked: Tensor | None
    bias: Tensor | None

    @staticmethod
    def of(mask: Tensor | None, shape: tuple[int, int, int, int]) -> _Mask:
        if mask is None:
            return _Mask(None, None)
        if mask.dtype == torch.bool:
            return _Mask((~mask).expand(shape), None)  # inverted once, at the mask's own size
        return _Mask(None, mask.expand(shape))

    def apply(
        self, scores: Tensor, group: _Group, rows: slice, cols: slice, causal: Tensor | None
    ) -> None:
        """Mask one tile of base-2 scores (n, bq, bk) in place."""
        heads = group.heads.stop - group.heads.start
        tile = scores.view(-1, heads, *scores.shape[1:])  # (bb, hh, bq, bk)
        if self.blocked is not None:
            tile.masked_fill_(self.blocked[group.batches, group.heads, rows, cols], float("-inf"))
        elif self.bias is not None:
            tile.add_(self.bias[group.batches, group.heads, rows, cols], alpha=LOG2E)
        if causal is not None:
            scores.masked_fill_(causal, float("-inf"))


class _Options(NamedTuple):
    """Everything but the tensors that the forward and the backward share."""

    mask: _Mask | None
    causal: bool
    scale: float
    block: int


class TileWorkspace:
    """The kernel's tile buffers, kept between calls by a caller that calls it many times
    (ring attention, piece by piece).  A buffer made anew per call is, at 32 MiB, a fresh
    mapping from the operating system (glibc maps blocks that large), and touching it
    page-faults on every call: a third of the time of a piece's backward on a CPU."""

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def buffer(self, name: str, numel: int, like: Tensor) -> Tensor:
        """A flat buffer of at least ``numel`` elements of ``like``'s dtype and device."""
        held = self._buffers.get(name)
        stale = held is None or (held.dtype, held.device) != (like.dtype, like.device)
        if stale or held.numel() < numel:
            held = self._buffers[name] = like.new_empty(numel)
        return held[:numel]


def _scratch(workspace: TileWorkspace | None, name: str, numel: int, like: Tensor) -> Tensor:
    return like.new_empty(numel) if workspace is None else workspace.buffer(name, numel, like)
