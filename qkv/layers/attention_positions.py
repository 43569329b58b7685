"""Positions applied inside attention, after the projections: the protocol RoPE and ALiBi share.

Position schemes come in two kinds.  *Input* positions (sinusoidal, learned) change the token
vectors before any block.  *Attention* positions act inside every attention layer: rotary
embeddings rotate the queries and keys (Su et al. 2021), ALiBi adds a distance bias to the
scores (Press et al. 2022).  :class:`~qkv.layers.MultiHeadAttention` takes one attention
position component (``positions=``) and calls it for self-attention:

    q = positions.rotate(q, start=past)            # (B, H, Tq, Dh), positions past..past+Tq-1
    k_new = positions.rotate(k_new, start=past)    # before the keys enter a KV cache
    bias = positions.bias(query_start=past, num_queries=Tq, num_keys=Tk, ...)   # (H, Tq, Tk) or None

where ``past`` is the number of positions already in the KV cache (0 without one), so cached
decoding sees exactly the positions a full forward pass sees.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["AttentionPositions"]


@runtime_checkable
class AttentionPositions(Protocol):
    """What an attention position component provides (duck-typed; RoPE and ALiBi implement it).

    A component may also subclass it (``class RoPE(nn.Module, AttentionPositions)``) and
    inherit the half it does not use: ``rotate`` is the identity, ``bias`` is None."""

    def rotate(self, x: Tensor, *, start: int) -> Tensor:
        """Shapes: x (B, H, T, Dh) at positions start..start+T-1 -> (B, H, T, Dh).

        Identity for schemes that only bias the scores."""
        return x

    def bias(
        self,
        *,
        query_start: int,
        num_queries: int,
        num_keys: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Tensor | None:
        """An additive score bias (H, Tq, Tk) for queries at positions query_start.. and keys at
        positions 0..num_keys-1, or None for schemes that only rotate."""
        return None
