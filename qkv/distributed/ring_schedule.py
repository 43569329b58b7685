"""The schedule of :mod:`.ring`: what its passes share (:class:`_Ring`), and which pairs
of a rank's query chunks and the key chunks it holds at a ring step meet -- in full, on
their causal diagonal, under the block mask's tile, or not at all."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from qkv.errors import InputError

from .layout import SequenceLayout


class _Ring(NamedTuple):
    """What forward and backward share besides tensors."""

    layout: SequenceLayout
    group: Any
    next_peer: int  # global ranks, as the point-to-point ops want them
    prev_peer: int
    causal: bool
    mask_mod: Any
    scale: float
    block_size: int


def _pairs(ring: _Ring, step: int, query: Tensor):
    """(query rows, key cols, mask or None, causal diagonal) for each pair of a local query
    chunk and a chunk of the keys held at ``step`` (those of rank r - step) that has any
    allowed score; pairs entirely masked are skipped."""
    layout = ring.layout
    source = (layout.rank - step) % layout.world_size
    size = layout.chunk_len
    for qi, q_chunk in enumerate(layout.chunks):
        rows = slice(qi * size, (qi + 1) * size)
        for ki, k_chunk in enumerate(layout.chunks_of(source)):
            if ring.causal and k_chunk > q_chunk:
                continue  # entirely in the future
            cols = slice(ki * size, (ki + 1) * size)
            diagonal = ring.causal and k_chunk == q_chunk
            mask = None
            if ring.mask_mod is not None:
                mask = _mask_tile(ring.mask_mod, query, q_chunk * size, k_chunk * size, size)
                if diagonal:
                    mask = (
                        mask & torch.ones(size, size, dtype=torch.bool, device=mask.device).tril()
                    )
                    diagonal = False
                if not bool(mask.any()):
                    continue
            yield rows, cols, mask, diagonal


def _mask_tile(mask_mod, query: Tensor, q_start: int, k_start: int, size: int) -> Tensor:
    """The block mask of one pair of chunks: (B or 1, H or 1, size, size) bool."""
    (batch, heads), device = query.shape[:2], query.device
    b = torch.arange(batch, device=device)[:, None, None, None]
    h = torch.arange(heads, device=device)[None, :, None, None]
    q_idx = torch.arange(q_start, q_start + size, device=device)[None, None, :, None]
    kv_idx = torch.arange(k_start, k_start + size, device=device)[None, None, None, :]
    tile = torch.as_tensor(mask_mod(b, h, q_idx, kv_idx))
    if tile.dtype != torch.bool:
        raise InputError(f"block_mask.mask_mod must return booleans, got {tile.dtype}")
    return torch.broadcast_to(tile, torch.broadcast_shapes(tile.shape, (1, 1, size, size)))
