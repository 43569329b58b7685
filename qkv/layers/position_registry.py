"""The registry of position schemes (SPEC section 4), as :mod:`qkv.layers.scores` is for scores.

Two roles.  *Input* schemes change the token vectors (B, T, D) before the first block
(:mod:`qkv.layers.positions`: "sinusoidal", "learned", "learned_concat").  *Attention* schemes
act inside every self-attention layer (:mod:`qkv.layers.relative_positions`: "rope" rotates
queries and keys, "alibi" biases the scores).  A model asks for both sides by name:

    embed = build_input_positions(name, d_model=..., max_len=..., dropout=...)   # (B, T, D) ->
    inside = build_attention_positions(name, d_model=..., num_heads=...)  # None for input kinds
    MultiHeadAttention(d_model, num_heads, positions=inside)

so a model holds no ``if kind == ...``; a new scheme is a class and one
:func:`register_position` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from qkv.errors import InputError

from .attention_positions import AttentionPositions
from .positions import (
    ConcatenatedPositionalEmbedding,
    LearnedPositionalEmbedding,
    NoInputPositions,
    SinusoidalPositionalEncoding,
)
from .relative_positions import ALiBi, RotaryEmbedding

__all__ = [
    "PositionKind",
    "INPUT",
    "ATTENTION",
    "register_position",
    "available_positions",
    "position_kind",
    "build_position",
    "build_input_positions",
    "build_attention_positions",
]

INPUT = "input"  #: changes the token vectors before the first block
ATTENTION = "attention"  #: acts inside self-attention (an AttentionPositions component)

PositionFactory = Callable[..., nn.Module]


@dataclass(frozen=True)
class PositionKind:
    """A registered position scheme: its name, its role (:data:`INPUT` or :data:`ATTENTION`)
    and ``build(*, d_model, num_heads, max_len, dropout)`` making its component."""

    name: str
    role: str
    build: PositionFactory


_POSITIONS: dict[str, PositionKind] = {}


def register_position(name: str, build: PositionFactory, *, role: str) -> None:
    """Add a scheme.  ``build(*, d_model, num_heads, max_len, dropout) -> nn.Module``: for
    :data:`INPUT`, a module ``(x (B, T, D), *, offset) -> (B, T, D)``; for :data:`ATTENTION`,
    an :class:`~qkv.layers.attention_positions.AttentionPositions` component."""
    if role not in (INPUT, ATTENTION):
        raise InputError(f"role={role!r} must be {INPUT!r} or {ATTENTION!r}")
    _POSITIONS[name] = PositionKind(name, role, build)


def available_positions(role: str | None = None) -> list[str]:
    """Registered scheme names, all of them or those of one role."""
    return sorted(name for name, kind in _POSITIONS.items() if role in (None, kind.role))


def position_kind(name: str) -> PositionKind:
    """The registered scheme called ``name``; InputError naming the choices otherwise."""
    if name not in _POSITIONS:
        raise InputError(
            f"unknown positions {name!r}; choose from {available_positions()} or "
            "register_position()"
        )
    return _POSITIONS[name]


def build_position(
    name: str, *, d_model: int, num_heads: int = 1, max_len: int = 1024, dropout: float = 0.0
) -> nn.Module:
    """Build the component of the scheme ``name`` (input or attention, as registered)."""
    kind = position_kind(name)
    return kind.build(d_model=d_model, num_heads=num_heads, max_len=max_len, dropout=dropout)


def build_input_positions(
    name: str, *, d_model: int, num_heads: int = 1, max_len: int = 1024, dropout: float = 0.0
) -> nn.Module:
    """What a model applies to its token vectors: the scheme itself for an input scheme, a
    :class:`NoInputPositions` (dropout only) for an attention scheme."""
    if position_kind(name).role == ATTENTION:
        return NoInputPositions(d_model, dropout=dropout)
    return build_position(
        name, d_model=d_model, num_heads=num_heads, max_len=max_len, dropout=dropout
    )


def build_attention_positions(
    name: str, *, d_model: int, num_heads: int, max_len: int = 1024
) -> AttentionPositions | None:
    """What a model passes to its self-attention layers (``MultiHeadAttention(positions=)``):
    the component of an attention scheme, None for an input scheme."""
    if position_kind(name).role == INPUT:
        return None
    return build_position(name, d_model=d_model, num_heads=num_heads, max_len=max_len)


def _rotary(*, d_model: int, num_heads: int, max_len: int, **_: object) -> RotaryEmbedding:
    if d_model % num_heads:
        raise InputError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    return RotaryEmbedding(d_model // num_heads, max_len=max_len)


register_position(
    "sinusoidal",
    lambda *, d_model, max_len, dropout, **_: SinusoidalPositionalEncoding(
        d_model, max_len=max_len, dropout=dropout
    ),
    role=INPUT,
)
register_position(
    "learned",
    lambda *, d_model, max_len, dropout, **_: LearnedPositionalEmbedding(
        max_len, d_model, dropout=dropout
    ),
    role=INPUT,
)
register_position(
    "learned_concat",
    lambda *, d_model, max_len, dropout, **_: ConcatenatedPositionalEmbedding(
        max_len, d_model, dropout=dropout
    ),
    role=INPUT,
)
register_position("rope", _rotary, role=ATTENTION)
register_position("alibi", lambda *, num_heads, **_: ALiBi(num_heads), role=ATTENTION)
