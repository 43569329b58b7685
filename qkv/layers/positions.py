"""Input positions (SPEC section 4): sinusoidal encodings and learned embeddings, added or
concatenated-then-projected, acting on token vectors (B, T, D) before the first block.

The other role, positions acting inside attention (RoPE, ALiBi), lives in
:mod:`qkv.layers.relative_positions` (re-exported here); models choose either kind by name
from :mod:`qkv.layers.position_registry`.  Every ``offset`` is the position of the first
token given, for decoding with a KV cache.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.positions import sinusoidal_encoding

from .relative_positions import ALiBi, RotaryEmbedding

__all__ = [
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "ConcatenatedPositionalEmbedding",
    "NoInputPositions",
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
            raise InputError(f"max_len={max_len} must be >= 0 (or None to cache nothing)")
        self.d_model = d_model
        self.base = base
        self.dropout = nn.Dropout(dropout)
        cached = sinusoidal_encoding(max_len or 0, d_model, base=base)
        self.register_buffer("encoding", cached, persistent=False)  # (max_len, d_model)

    def forward(self, x: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """x plus the encodings of positions ``offset .. offset + T - 1`` (or of ``positions``
        (B, T), one per token: packed documents restart at 0), then dropout.  Shapes: x
        (B, T, d_model) -> (B, T, d_model)."""
        length = _check_tokens(x, self.d_model, "SinusoidalPositionalEncoding")
        _check_offset(offset)
        if positions is not None:
            count = int(_check_positions(positions, x).max()) + 1
            table = self.encoding
            if count > table.shape[0]:
                table = sinusoidal_encoding(count, self.d_model, base=self.base, device=x.device)
            return self.dropout(x + table[positions].to(x.dtype))  # (B, T, d_model)
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
    """One trainable vector per position, added to the token vector: ``x + P[pos]``.

    ``P`` is (max_len, d_model).  Positions at or past ``max_len`` have no vector: such a
    sequence raises :class:`~qkv.errors.InputError`.  The vectors start as N(0, 0.02^2), small
    beside the token embeddings (as BERT and GPT-2).

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, max_len: int, d_model: int, *, dropout: float = 0.0):
        super().__init__()
        self.max_len = _check_max_len(max_len)
        self.d_model = d_model
        self.embedding = _position_table(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """x plus the learned vectors of positions ``offset .. offset + T - 1`` (or of
        ``positions`` (B, T), one per token), then dropout.
        Shapes: x (B, T, d_model) -> (B, T, d_model)."""
        vectors = _learned_vectors(self, x, offset, positions)  # (T or B, T, d_model)
        return self.dropout(x + vectors)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


class ConcatenatedPositionalEmbedding(nn.Module):
    """One trainable vector per position, concatenated to the token vector and projected back:
    ``W [x; P[pos]] + b``.

    ``P`` is (max_len, position_dim) (``position_dim`` defaults to ``d_model``); the Linear
    ``W`` maps ``d_model + position_dim`` back to ``d_model``, so the blocks see the usual width.
    Positions at or past ``max_len`` raise :class:`~qkv.errors.InputError`.

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(
        self,
        max_len: int,
        d_model: int,
        *,
        position_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.max_len = _check_max_len(max_len)
        self.d_model = d_model
        self.position_dim = d_model if position_dim is None else position_dim
        if not isinstance(self.position_dim, int) or self.position_dim < 1:
            raise InputError(f"position_dim={position_dim!r} must be a positive integer")
        self.embedding = _position_table(max_len, self.position_dim)
        self.projection = nn.Linear(d_model + self.position_dim, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """$W [x_t; p_{t + offset}] + b$ (or $p$ of ``positions`` (B, T)), then dropout.
        Shapes: x (B, T, d_model) -> (B, T, d_model)."""
        vectors = _learned_vectors(self, x, offset, positions)  # (T or B, T, position_dim)
        vectors = vectors.expand(x.shape[0], x.shape[1], self.position_dim)  # (B, T, position_dim)
        return self.dropout(self.projection(torch.cat([x, vectors], dim=-1)))  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}, position_dim={self.position_dim}"


class NoInputPositions(nn.Module):
    """The input side of an attention position scheme (RoPE, ALiBi): token vectors pass
    unchanged, then dropout (the embedding dropout every input scheme also applies).

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(self, d_model: int, *, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """x unchanged but for dropout (the positions act inside attention; ``positions``
        is accepted as the input schemes take it).  Shapes: x (B, T, d_model) -> (B, T,
        d_model)."""
        _check_tokens(x, self.d_model, "NoInputPositions")
        _check_offset(offset)
        if positions is not None:
            _check_positions(positions, x)
        return self.dropout(x)


def _position_table(max_len: int, width: int) -> nn.Embedding:
    table = nn.Embedding(max_len, width)
    nn.init.normal_(table.weight, std=0.02)
    return table


def _learned_vectors(
    layer: nn.Module, x: Tensor, offset: int, positions: Tensor | None = None
) -> Tensor:
    """The learned vectors of the positions of ``x``, cast to its dtype: (T, width), or
    (B, T, width) for ``positions`` (B, T)."""
    length = _check_tokens(x, layer.d_model, type(layer).__name__)
    _check_offset(offset)
    if positions is not None:
        last = int(_check_positions(positions, x).max())
        if last >= layer.max_len:
            raise InputError(
                f"positions go up to {last}, but max_len={layer.max_len} learned positions "
                "exist; raise max_len, or use SinusoidalPositionalEncoding"
            )
        return layer.embedding(positions).to(x.dtype)
    if offset + length > layer.max_len:
        raise InputError(
            f"a sequence of length {length} at offset {offset} needs positions up to "
            f"{offset + length - 1}, but max_len={layer.max_len} learned positions exist; "
            "raise max_len, or use SinusoidalPositionalEncoding, which extends to any length"
        )
    positions = torch.arange(offset, offset + length, device=x.device)
    return layer.embedding(positions).to(x.dtype)


def _check_max_len(max_len: int) -> int:
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise InputError(f"max_len={max_len!r} must be a positive integer")
    return max_len


def _check_tokens(x: Tensor, d_model: int, layer: str) -> int:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise InputError(
            f"{layer} expects token vectors (B, T, d_model) with d_model={d_model}, "
            f"got shape {tuple(x.shape)}"
        )
    return x.shape[1]


def _check_positions(positions: Tensor, x: Tensor) -> Tensor:
    """Per-token positions (B, T) of x (B, T, D): non-negative integers."""
    if (
        not isinstance(positions, Tensor)
        or positions.is_floating_point()
        or positions.shape != x.shape[:2]
    ):
        shape = tuple(positions.shape) if isinstance(positions, Tensor) else positions
        raise InputError(
            f"positions must be integer positions (B, T) = {tuple(x.shape[:2])}, got {shape}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise InputError("positions must be non-negative (the first position of a document is 0)")
    return positions


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InputError(f"offset={offset!r} must be a non-negative integer (the first position)")
