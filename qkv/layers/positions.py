"""Position layers (SPEC section 4): sinusoidal, learned (added or concatenated), RoPE, ALiBi.

The first two act on token vectors (B, T, D) before attention; :class:`RotaryEmbedding`
acts on per-head queries and keys (B, H, T, Dh); :class:`ALiBi` makes a bias for the scores.
Every ``offset`` is the position of the first token given, for decoding with a KV cache.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from qkv.functional.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    rotary_angles,
    sinusoidal_encoding,
)

__all__ = [
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
]


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed encodings of Vaswani et al. 2017 to token vectors, then dropout.

    No parameters.  The first ``max_len`` rows are computed once (a non-persistent buffer,
    so checkpoints do not carry it); longer sequences are computed on the fly, so any length
    works.  ``max_len=None`` caches nothing.  (The paper also multiplies the token
    embeddings by sqrt(d_model); that is the embedding layer's business, not this one's.)

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(
        self,
        d_model: int,
        *,
        max_len: int | None = 1024,
        dropout: float = 0.0,
        base: float = 10000.0,
    ):
        super().__init__()
        if max_len is not None and max_len < 0:
            raise ValueError(f"max_len={max_len} must be >= 0 (or None to cache nothing)")
        self.d_model = d_model
        self.base = base
        self.dropout = nn.Dropout(dropout)
        cached = sinusoidal_encoding(max_len or 0, d_model, base=base)
        self.register_buffer("encoding", cached, persistent=False)  # (max_len, d_model)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        length = _check_tokens(x, self.d_model, "SinusoidalPositionalEncoding")
        _check_offset(offset)
        if offset + length <= self.encoding.shape[0]:
            encoding = self.encoding[offset : offset + length]
        else:
            encoding = sinusoidal_encoding(
                length, self.d_model, base=self.base, offset=offset, device=x.device, dtype=x.dtype
            )
        return self.dropout(x + encoding.to(x.dtype))  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.encoding.shape[0]}, base={self.base}"


class LearnedPositionalEmbedding(nn.Module):
    """One trainable vector per position, added to the token vector or concatenated to it.

    - ``mode="add"``: ``x + P[pos]``, with ``P`` of width ``d_model``.
    - ``mode="concat"``: ``W [x; P[pos]] + b``, with ``P`` of width ``position_dim``
      (default ``d_model``) and a Linear from ``d_model + position_dim`` back to
      ``d_model``, so both modes return (B, T, d_model).

    Positions at or past ``max_len`` have no vector: such a sequence raises ValueError.
    The vectors start as N(0, 0.02^2), small beside the token embeddings (as BERT and GPT-2).

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        mode: str = "add",
        position_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        if mode not in ("add", "concat"):
            raise ValueError(f'mode={mode!r} must be "add" or "concat"')
        if mode == "add" and position_dim not in (None, d_model):
            raise ValueError(
                f'mode="add" needs position vectors as wide as the tokens (d_model={d_model}), '
                f'got position_dim={position_dim}; leave it unset or use mode="concat"'
            )
        if max_len < 1:
            raise ValueError(f"max_len={max_len} must be a positive integer")
        self.max_len = max_len
        self.d_model = d_model
        self.mode = mode
        self.position_dim = d_model if position_dim is None else position_dim
        self.embedding = nn.Embedding(max_len, self.position_dim)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.projection = (
            nn.Linear(d_model + self.position_dim, d_model) if mode == "concat" else None
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        length = _check_tokens(x, self.d_model, "LearnedPositionalEmbedding")
        _check_offset(offset)
        if offset + length > self.max_len:
            raise ValueError(
                f"a sequence of length {length} at offset {offset} needs positions up to "
                f"{offset + length - 1}, but max_len={self.max_len} learned positions exist; "
                "raise max_len, or use SinusoidalPositionalEncoding, which extends to any length"
            )
        positions = torch.arange(offset, offset + length, device=x.device)
        vectors = self.embedding(positions).to(x.dtype)  # (T, position_dim)
        if self.projection is None:
            return self.dropout(x + vectors)
        vectors = vectors.expand(x.shape[0], length, self.position_dim)
        return self.dropout(self.projection(torch.cat([x, vectors], dim=-1)))  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, mode={self.mode!r}"


class RotaryEmbedding(nn.Module):
    """Rotary position embeddings (RoPE) for per-head queries and keys.

    Half-split pairing (channel ``i`` with ``i + Dh/2``, as GPT-NeoX / LLaMA); see
    :func:`qkv.functional.positions.rotary_angles`.  No parameters.

    Positions: the keys are at ``offset .. offset + Tk - 1`` and the queries are the *last*
    ``Tq`` of those (end-aligned, as qkv's causal mask).  Decoding with a KV cache of ``t``
    tokens: rotate the new query and the new key together with ``offset=t`` (both have
    ``Tq = Tk``), then append the rotated key to the cache.

    Shapes: query (B, H, Tq, Dh), key (B, Hkv, Tk, Dh) -> the same, rotated.
    """

    def __init__(self, head_dim: int, *, base: float = 10000.0):
        super().__init__()
        rotary_angles(1, head_dim, base=base)  # validates head_dim and base early
        self.head_dim = head_dim
        self.base = base

    def forward(self, query: Tensor, key: Tensor, *, offset: int = 0) -> tuple[Tensor, Tensor]:
        for name, t in (("query", query), ("key", key)):
            if t.dim() != 4 or t.shape[-1] != self.head_dim:
                raise ValueError(
                    f"{name} must have shape (B, H, T, Dh) with Dh = head_dim = {self.head_dim}, "
                    f"got {tuple(t.shape)}"
                )
        _check_offset(offset)
        query_len, key_len = query.shape[2], key.shape[2]
        if query_len > key_len + offset:
            raise ValueError(
                f"queries are the last positions of the keys, so query length {query_len} may "
                f"not exceed key length {key_len} plus offset {offset}"
            )
        query_start = offset + key_len - query_len
        key_cos, key_sin = self._angles(key_len, offset, key)  # (Tk, Dh)
        query_cos, query_sin = self._angles(query_len, query_start, query)  # (Tq, Dh)
        return apply_rotary(query, query_cos, query_sin), apply_rotary(key, key_cos, key_sin)

    def _angles(self, length: int, offset: int, like: Tensor) -> tuple[Tensor, Tensor]:
        return rotary_angles(
            length,
            self.head_dim,
            base=self.base,
            offset=offset,
            device=like.device,
            dtype=like.dtype,
        )

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"


class ALiBi(nn.Module):
    """ALiBi (Press et al. 2022): per-head linear distance biases, no position embeddings.

    ``bias = alibi(query_len, key_len)``, then ``attention(q, k, v, mask=bias, causal=True)``.
    The slopes are a non-persistent buffer; queries are end-aligned as in
    :func:`qkv.functional.positions.alibi_bias`.

    Shapes: -> bias (1, H, Tq, Tk).
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)  # (H,)

    def forward(self, query_len: int, key_len: int) -> Tensor:
        return alibi_bias(self.num_heads, query_len, key_len, slopes=self.slopes)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"


def _check_tokens(x: Tensor, d_model: int, layer: str) -> int:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(
            f"{layer} expects token vectors (B, T, d_model) with d_model={d_model}, "
            f"got shape {tuple(x.shape)}"
        )
    return x.shape[1]


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset={offset!r} must be a non-negative integer (the first position)")
