"""The translation models and their sizes: one dict of values per family and size.

The learning rate, warm-up, batch tokens, schedule and label smoothing of each size are
``qkv.training.recipes.RECIPES``' rows; the model's own values are here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from ..models import RNNConfig, TransformerConfig, build_model

if TYPE_CHECKING:
    from .translation import TranslationSetup

__all__ = [
    "SIZES",
    "MODEL_BUILDERS",
    "SMALL_DATA_TRANSFORMER",
    "SMALL_DATA_RNN",
    "SMALL_DATA_VOCAB_SIZE",
    "DEFAULT_VOCAB_SIZE",
    "build_translation_model",
]

SIZES = ("small", "medium", "small-data", "base")

#: ``--size small-data``, the Transformer.  Started from the low-resource recipes of Sennrich
#: & Zhang (2019, "Revisiting Low-Resource NMT") and Araabi & Monz (2020, "Optimizing
#: Transformer for Low-Resource NMT"): pre-norm blocks, few layers and heads, dropout 0.3 on
#: the residuals and the feed-forward activation, 0.1 on the attention weights, word dropout
#: 0.1 (Araabi & Monz found 5 + 5 blocks best; 3 + 3 here, for CPU budgets).  Chosen by
#: measurement on ding-de-en's valid split (``python -m benchmarks.small_data_presets``;
#: docs/results.md): in runs of 20-30 minutes on a CPU, a few epochs, that regularisation
#: slowed learning more than it prevented over-fitting; dropout 0.1 everywhere and no word
#: dropout, with a peak lr of 2e-3 (``recipes.RECIPES``), reached a valid loss of 4.47 at
#: update 400 where the recipe's values had 5.25.  Raise them for longer runs.
SMALL_DATA_TRANSFORMER: dict[str, Any] = dict(
    d_model=256,
    num_heads=4,
    num_encoder_layers=3,
    num_decoder_layers=3,
    d_ff=1024,
    norm_first=True,
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.1,
    word_dropout=0.0,
)

#: ``--size small-data``, the RNNs (with and without attention): 256 wide.  Started from
#: Sennrich & Zhang's RNN (dropout 0.3, lr 1e-3; they also used word dropout, which
#: ``RNNConfig`` does not have); chosen by measurement on ding-de-en's valid split
#: (``python -m benchmarks.small_data_presets``; docs/results.md): dropout 0.2 with a peak
#: lr of 2e-3 reached a valid loss of 3.91 in 12 minutes where dropout 0.3 and 1e-3 had 4.08.
SMALL_DATA_RNN: dict[str, Any] = dict(embedding_dim=256, hidden_dim=256, dropout=0.2)

#: The joint BPE vocabulary when ``vocab_size`` is not given: small corpora want small
#: vocabularies (Sennrich & Zhang 2019; 4,000 is what docs/results.md's ding runs used).
SMALL_DATA_VOCAB_SIZE = 4000
DEFAULT_VOCAB_SIZE = 8000

#: size -> fields over ``TransformerConfig.small`` (``base``: over ``TransformerConfig.base``)
TRANSFORMER_SIZES: dict[str, dict[str, Any]] = {
    "small": {},
    "medium": dict(
        d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024, dropout=0.3
    ),
    "small-data": SMALL_DATA_TRANSFORMER,
    "base": {},
}

#: size -> fields of ``RNNConfig`` (its defaults otherwise: dropout 0.1, 1 GRU layer)
RNN_SIZES: dict[str, dict[str, Any]] = {
    "small": dict(embedding_dim=256, hidden_dim=256),
    "medium": dict(embedding_dim=256, hidden_dim=256, dropout=0.3),
    "small-data": SMALL_DATA_RNN,
    "base": dict(embedding_dim=512, hidden_dim=512),
}


def _transformer(setup: TranslationSetup, vocab_size: int) -> TransformerConfig:
    preset = TransformerConfig.base if setup.size == "base" else TransformerConfig.small
    return preset(
        vocab_size,
        share_embeddings=True,
        tie_output=True,
        max_len=setup.max_len + 2,
        **{**TRANSFORMER_SIZES[setup.size], **setup.dropout_overrides()},
    )


def _rnn(attention: str | None) -> Callable[[TranslationSetup, int], RNNConfig]:
    def build(setup: TranslationSetup, vocab_size: int) -> RNNConfig:
        return RNNConfig(
            vocab_size,
            **{**RNN_SIZES[setup.size], **setup.dropout_overrides()},
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
