"""The registry of the recurrent translator's decoders, as :mod:`qkv.layers.scores` is for
scores: ``RNNConfig.attention`` names the decoder, and the model holds no ``if``.

"none" (the baseline's :class:`ContextDecoder`) and "additive" (:class:`BahdanauDecoder`)
have decoders of their own; every other score is compared by :class:`LuongDecoder`.  A new
decoder is a class and one :func:`register_decoder` call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .rnn_decoders import BahdanauDecoder, ContextDecoder, LuongDecoder, RecurrentDecoder

__all__ = [
    "NO_ATTENTION",
    "DecoderFactory",
    "register_decoder",
    "build_decoder",
    "available_decoders",
]

#: ``attention="none"``: the baseline whose decoder sees only the encoder's final state.
NO_ATTENTION = "none"


#: Builds a decoder from an ``RNNConfig`` and the width of the encoder states it reads.
DecoderFactory = Callable[[Any, int], RecurrentDecoder]

_DECODERS: dict[str, DecoderFactory] = {}


def register_decoder(attention: str, factory: DecoderFactory) -> None:
    """Make ``RNNConfig(attention=attention)`` build ``factory(config, context_dim)``."""
    _DECODERS[attention] = factory


def available_decoders() -> list[str]:
    """The attention names with a decoder of their own (any other score goes to Luong's)."""
    return sorted(_DECODERS)


def build_decoder(config: Any, *, context_dim: int) -> RecurrentDecoder:
    """The decoder registered for ``config.attention``; a score without a decoder of its own
    (the core's "dot", "general", "scaled_dot", ... and any score registered later) is
    compared by Luong's decoder."""
    return _DECODERS.get(config.attention, _luong)(config, context_dim)


def _sizes(config: Any, context_dim: int) -> dict[str, Any]:
    return dict(
        embedding_dim=config.embedding_dim,
        hidden_dim=config.hidden_dim,
        context_dim=context_dim,
        num_layers=config.num_layers,
        cell=config.cell,
        dropout=config.dropout,
    )


def _luong(config: Any, context_dim: int) -> RecurrentDecoder:
    return LuongDecoder(
        score=config.attention, **_sizes(config, context_dim), input_feeding=config.input_feeding
    )


def _bahdanau(config: Any, context_dim: int) -> RecurrentDecoder:
    attention_dim = config.attention_dim or config.hidden_dim
    return BahdanauDecoder(**_sizes(config, context_dim), attention_dim=attention_dim)


def _context(config: Any, context_dim: int) -> RecurrentDecoder:
    return ContextDecoder(**_sizes(config, context_dim))


register_decoder("additive", _bahdanau)
register_decoder(NO_ATTENTION, _context)  # the baseline
