"""The translation models: one config builder per model type, sized by the family's preset
(:mod:`qkv.tasks.presets`, families ``transformer`` and ``rnn``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from ..models import RNNConfig, TransformerConfig, build_model
from .presets import Preset, preset_for, sizes_of

if TYPE_CHECKING:
    from .translation import TranslationSetup

__all__ = ["SIZES", "MODEL_BUILDERS", "family_of", "translation_preset", "build_translation_model"]

SIZES = sizes_of("transformer")


def family_of(model: str) -> str:
    """The preset family of a translation model type."""
    return "transformer" if model == "transformer" else "rnn"


def translation_preset(setup: TranslationSetup) -> Preset:
    return preset_for(family_of(setup.model), setup.size)


def _transformer(setup: TranslationSetup, vocab_size: int) -> TransformerConfig:
    start = TransformerConfig.base if setup.size == "base" else TransformerConfig.small
    return start(
        vocab_size,
        share_embeddings=True,
        tie_output=True,
        max_len=setup.max_len + 2,
        **{**translation_preset(setup).model, **setup.dropout_overrides()},
    )


def _rnn(attention: str | None) -> Callable[[TranslationSetup, int], RNNConfig]:
    def build(setup: TranslationSetup, vocab_size: int) -> RNNConfig:
        return RNNConfig(
            vocab_size,
            **{**translation_preset(setup).model, **setup.dropout_overrides()},
            attention=setup.score if attention is None else attention,
            share_embeddings=True,
            max_len=setup.max_len + 2,
        )

    return build


#: model type -> config builder(setup, joint vocabulary size)
MODEL_BUILDERS: dict[str, Callable[[TranslationSetup, int], Any]] = {
    "transformer": _transformer,
    "rnn-attention": _rnn(None),
    "rnn": _rnn("none"),
}


def build_translation_model(setup: TranslationSetup, vocab_size: int) -> nn.Module:
    return build_model(setup.model, MODEL_BUILDERS[setup.model](setup, vocab_size))
