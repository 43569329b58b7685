"""Attention positions (SPEC section 4): RoPE and ALiBi, acting inside self-attention.

Both implement :class:`~qkv.layers.attention_positions.AttentionPositions`, so a
:class:`~qkv.layers.MultiHeadAttention` built with ``positions=RotaryEmbedding(...)`` or
``positions=ALiBi(...)`` applies them after its projections, with the KV cache's length as
the position of the first new token.  Neither has parameters or checkpoint state.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.patterns import alibi
from qkv.functional.positions import alibi_bias, alibi_slopes, apply_rotary, rotary_angles

from .attention_positions import AttentionPositions

__all__ = ["RotaryEmbedding", "ALiBi"]


class RotaryEmbedding(nn.Module, AttentionPositions):
    """Rotary position embeddings (RoPE, Su et al. 2021) for per-head queries and keys.

    Half-split pairing (channel ``i`` with ``i + Dh/2``, as GPT-NeoX / LLaMA); see
    :func:`qkv.functional.positions.rotary_angles`.  After the rotation the score of a query
    at position ``i`` and a key at ``j`` depends on the positions only through ``i - j``.

    As an attention position component: ``rotate(x, start=p)`` rotates (B, H, T, Dh) vectors
    at positions ``p .. p + T - 1``; ``bias`` is None.  Called directly,
    ``rope(query, key, offset=t)`` rotates both: the keys are at ``t .. t + Tk - 1`` and the
    queries are the *last* ``Tq`` of those (end-aligned, as qkv's causal mask).

    The cos/sin tables of the first ``max_len`` positions are computed once (in float64, kept
    as non-persistent float32 buffers, so checkpoints do not carry them); later positions, and
    float64 inputs, get tables computed on the fly, so any length works.

    Shapes: query (B, H, Tq, Dh), key (B, Hkv, Tk, Dh) -> the same, rotated.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0, max_len: int | None = 1024):
        super().__init__()
        if max_len is not None and (not isinstance(max_len, int) or max_len < 0):
            raise InputError(f"max_len={max_len!r} must be >= 0 (or None to cache nothing)")
        cos, sin = rotary_angles(max_len or 0, head_dim, base=base, dtype=torch.float32)
        self.register_buffer("cos_table", cos, persistent=False)  # (max_len, Dh)
        self.register_buffer("sin_table", sin, persistent=False)  # (max_len, Dh)
        self.head_dim = head_dim
        self.base = base

    def rotate(self, x: Tensor, *, start: int) -> Tensor:
        """Shapes: x (B, H, T, Dh) at positions start..start+T-1 -> (B, H, T, Dh)."""
        self._check_heads(x, "x")
        _check_start(start, "start")
        return apply_rotary(x, *self._angles(x.shape[2], start, x))

    def forward(self, query: Tensor, key: Tensor, *, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Queries and keys rotated by their positions: the keys start at ``offset``, the queries
        are the last positions of the keys.  Shapes: query (B, H, Tq, Dh), key (B, Hkv, Tk, Dh)
        -> the same two shapes."""
        self._check_heads(query, "query")
        self._check_heads(key, "key")
        _check_start(offset, "offset")
        query_len, key_len = query.shape[2], key.shape[2]
        if query_len > key_len + offset:
            raise InputError(
                f"queries are the last positions of the keys, so query length {query_len} may "
                f"not exceed key length {key_len} plus offset {offset}"
            )
        query_start = offset + key_len - query_len
        return self.rotate(query, start=query_start), self.rotate(key, start=offset)

    def _check_heads(self, x: Tensor, name: str) -> None:
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[-1] != self.head_dim:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise InputError(
                f"{name} must have shape (B, H, T, Dh) with Dh = head_dim = {self.head_dim}, "
                f"got {shape}"
            )

    def _angles(self, length: int, start: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """cos, sin (T, Dh) of positions start..start+T-1, in the dtype of ``like``."""
        end = start + length
        if end <= self.cos_table.shape[0] and like.dtype != torch.float64:
            cos, sin = self.cos_table[start:end], self.sin_table[start:end]
            return cos.to(like.dtype), sin.to(like.dtype)
        return rotary_angles(
            length,
            self.head_dim,
            base=self.base,
            offset=start,
            device=like.device,
            dtype=like.dtype,
        )

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, max_len={self.cos_table.shape[0]}"


class ALiBi(nn.Module, AttentionPositions):
    """ALiBi (Press et al. 2022): per-head linear distance biases, no position embeddings.

    The score of query ``i`` and key ``j`` in head ``h`` gets ``-slope_h * |i - j|``
    (slopes: :func:`~qkv.functional.positions.alibi_slopes`).  In causal (decoder)
    self-attention a query sees only keys ``j <= i``, where this is the paper's
    ``-slope_h * (i - j)``.  In non-causal (encoder) self-attention it is the symmetric
    variant: a key ``d`` positions ahead costs as much as one ``d`` positions behind, so the
    bias itself says nothing about direction (word order then comes only from the distance).

    As an attention position component: ``bias(query_start=p, num_queries=Tq, num_keys=Tk,
    ...)`` is (H, Tq, Tk) for queries at positions ``p ..`` and keys at ``0 .. Tk - 1``;
    ``rotate`` is the identity.  Called directly, ``alibi(query_len, key_len)`` is the
    end-aligned (1, H, Tq, Tk) bias of :func:`~qkv.functional.positions.alibi_bias`.

    The slopes are a non-persistent buffer; biases are computed in float32 (or the slopes'
    wider dtype) and cast at the end, so half-precision models keep exact distances.
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)  # (H,)

    def bias(
        self,
        *,
        query_start: int,
        num_queries: int,
        num_keys: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Tensor:
        """Shapes: -> (H, Tq, Tk), ``-slope_h * |i - j|`` for i = query_start.. and j = 0.."""
        _check_start(query_start, "query_start")
        slopes = self.slopes.to(
            device=device, dtype=torch.promote_types(self.slopes.dtype, torch.float32)
        )
        table = alibi_bias(
            self.num_heads, num_queries, num_keys, slopes=slopes, query_start=query_start
        )
        return table[0].to(dtype)  # (H, Tq, Tk)

    def score_mod(self, *, query_start: int):
        """The same bias as a flex_attention score function (no (Tq, Tk) tensor): queries at
        positions query_start.., keys at 0..  (:func:`qkv.functional.patterns.alibi`)."""
        _check_start(query_start, "query_start")
        return alibi(self.slopes, query_start)

    def forward(self, query_len: int, key_len: int) -> Tensor:
        """The additive bias $-m_h |i - j|$ (end-aligned queries).  Shapes: -> (1, H, query_len,
        key_len)."""
        return alibi_bias(self.num_heads, query_len, key_len, slopes=self.slopes)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"


def _check_start(start: object, name: str) -> None:
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise InputError(f"{name}={start!r} must be a non-negative integer (the first position)")
