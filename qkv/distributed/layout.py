"""Which tokens of a sequence each rank of a context-parallel group holds.

The sequence of length T is cut into equal chunks.  Without a causal mask rank r of P holds
chunk r of P.  With one it holds chunks r and 2P-1-r of 2P (the zigzag layout): under a
causal mask an early chunk sees few keys and a late one many, and pairing the r-th earliest
with the r-th latest gives every rank the same work.

:func:`shard_sequence` cuts a whole tensor to this rank's part, :func:`unshard_sequence`
gathers the parts back in order, and :func:`sequence_positions` gives the global position
of each token this rank holds (what learned, sinusoidal, RoPE and ALiBi positions need).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from qkv.errors import InputError

__all__ = [
    "SequenceLayout",
    "sequence_layout",
    "shard_sequence",
    "unshard_sequence",
    "sequence_positions",
    "group_rank_and_size",
]


@dataclass(frozen=True)
class SequenceLayout:
    """This rank's chunks of a sequence of ``length`` tokens: ``chunks`` are global chunk
    numbers, in the order the rank holds them, each ``chunk_len`` tokens long."""

    rank: int
    world_size: int
    length: int
    chunks: tuple[int, ...]
    chunk_len: int

    @property
    def local_len(self) -> int:
        return len(self.chunks) * self.chunk_len

    def runs(self) -> list[tuple[int, int]]:
        """(first global position, length) of each contiguous run of tokens held, in order."""
        return [(chunk * self.chunk_len, self.chunk_len) for chunk in self.chunks]

    def chunks_of(self, rank: int) -> tuple[int, ...]:
        """The chunks another rank of the group holds."""
        return _chunks(rank, self.world_size, len(self.chunks) == 2)


def group_rank_and_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank, size) within ``group``; (0, 1) when torch.distributed is not initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _chunks(rank: int, world_size: int, causal: bool) -> tuple[int, ...]:
    return (rank, 2 * world_size - 1 - rank) if causal else (rank,)


def sequence_layout(length: int, *, causal: bool = False, group=None) -> SequenceLayout:
    """The layout of a whole sequence of ``length`` tokens over ``group`` (default: the
    world).  ``length`` must divide into P chunks (2P with ``causal``): pad it, or choose a
    context that is a multiple of that."""
    rank, world = group_rank_and_size(group)
    pieces = 2 * world if causal else world
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InputError(f"length={length!r} must be a positive number of tokens")
    if length % pieces:
        layout = f"the zigzag layout cuts it into 2P = {pieces}" if causal else f"P = {pieces}"
        raise InputError(
            f"a sequence of {length} tokens cannot be split evenly over {world} ranks "
            f"({layout} equal chunks); pad it or choose a length that is a multiple of {pieces}"
        )
    return SequenceLayout(rank, world, length, _chunks(rank, world, causal), length // pieces)


def local_layout(local_len: int, *, causal: bool, group=None) -> SequenceLayout:
    """The layout from this rank's part of ``local_len`` tokens (every rank holds as many)."""
    rank, world = group_rank_and_size(group)
    if causal and local_len % 2:
        raise InputError(
            f"causal ring attention holds two chunks per rank (the zigzag layout), so each "
            f"rank's part needs an even length; got {local_len} tokens.  Cut the sequence with "
            "shard_sequence(..., causal=True) from a length that is a multiple of 2P"
        )
    return sequence_layout(local_len * world, causal=causal, group=group)


def shard_sequence(tensor: Tensor, dim: int, *, causal: bool = False, group=None) -> Tensor:
    """This rank's part of ``tensor`` along ``dim`` (the sequence), in the layout
    :func:`~qkv.distributed.ring_attention` expects: chunk r of P, or chunks r and 2P-1-r
    of 2P with ``causal``.  ``dim`` counts from the end when negative, as in PyTorch; one
    out of range is an InputError.  Shapes: (..., T, ...) -> (..., T / P, ...)."""
    dim = _sequence_dim(tensor, dim)
    layout = sequence_layout(tensor.shape[dim], causal=causal, group=group)
    parts = [tensor.narrow(dim, start, size) for start, size in layout.runs()]
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0].clone()


def unshard_sequence(part: Tensor, dim: int, *, causal: bool = False, group=None) -> Tensor:
    """The whole sequence back from every rank's part, in order, on every rank (an all-gather;
    no gradient flows through it).  Shapes: (..., T / P, ...) -> (..., T, ...)."""
    dim = _sequence_dim(part, dim)
    layout = local_layout(part.shape[dim], causal=causal, group=group)
    if layout.world_size == 1:
        return part.clone()
    gathered = [torch.empty_like(part) for _ in range(layout.world_size)]
    dist.all_gather(gathered, part.contiguous(), group=group)
    pieces: dict[int, Tensor] = {}
    for rank, whole in enumerate(gathered):
        for index, chunk in enumerate(layout.chunks_of(rank)):
            pieces[chunk] = whole.narrow(dim, index * layout.chunk_len, layout.chunk_len)
    return torch.cat([pieces[chunk] for chunk in sorted(pieces)], dim)


def _sequence_dim(tensor: Tensor, dim: int) -> int:
    """``dim`` as a non-negative axis of ``tensor``: in [-ndim, ndim), as torch.narrow takes
    it; anything else (an axis past the last would otherwise wrap round to the batch) is an
    InputError."""
    if not isinstance(tensor, Tensor):
        raise InputError(
            f"expected a tensor to cut along its sequence, got {type(tensor).__name__}"
        )
    ndim = tensor.dim()
    if isinstance(dim, bool) or not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise InputError(
            f"dim={dim!r} is out of range for a tensor of {ndim} dimensions "
            f"{tuple(tensor.shape)}: give the sequence axis, in [{-ndim}, {ndim - 1}]"
        )
    return dim % ndim


def sequence_positions(
    length: int, *, causal: bool = False, group=None, device: torch.device | str | None = None
) -> Tensor:
    """The global positions (T / P,) of the tokens this rank holds of a sequence of
    ``length``, in the order :func:`shard_sequence` gives them."""
    layout = sequence_layout(length, causal=causal, group=group)
    return torch.cat(
        [torch.arange(start, start + size, device=device) for start, size in layout.runs()]
    )
