"""The configuration of the recurrent encoder-decoder translator (Bahdanau et al. 2015,
Luong et al. 2015, and the no-attention baseline of Sutskever et al. 2014 / Cho et al. 2014)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from qkv.layers.recurrent import RECURRENT_CELLS
from qkv.layers.scores import available_scores

from .checks import check_dropout, check_positive_ints, check_vocabularies
from .rnn_decoder_registry import NO_ATTENTION, available_decoders

__all__ = ["RNNConfig", "CELLS", "NO_ATTENTION"]

CELLS = tuple(RECURRENT_CELLS)  # ("gru", "lstm")


@dataclass(frozen=True)
class RNNConfig:
    """Every hyper-parameter of :class:`qkv.models.rnn.RNNTranslator` and ``RNNBaseline``.

    source_vocab_size / target_vocab_size: token vocabularies; ``target_vocab_size=None``
        means the same size as the source.
    embedding_dim: token embedding width (source and target).
    hidden_dim: H, the width of every recurrent state.  The encoder is bidirectional, so
        its states h_j are 2H wide; the decoder's are H wide.
    num_layers: stacked recurrent layers, in the encoder and in the decoder.
    cell: "gru" or "lstm".
    attention: the score that compares the decoder with the encoder states, by name.
        "additive" runs Bahdanau's decoder (the score uses the previous state s_{t-1} and
        the context enters the recurrent step); any other registered score ("dot",
        "scaled_dot", "general", ...) runs Luong's (the score uses the current state h_t
        and the attentional state tanh(W_c [c_t; h_t]) feeds the output layer).  For
        "dot"/"scaled_dot" the 2H-wide encoder states are projected to H-wide keys so the
        widths match.  "none" is the baseline without attention.  ``None`` lets the model
        choose: "additive" for ``RNNTranslator``, "none" for ``RNNBaseline``.
    attention_dim: width of the additive score's hidden layer (``None``: hidden_dim, as
        Bahdanau et al.'s n' = n; checkpoints written before 2026-12-01, when ``None``
        gave the encoder states' width 2H, load with the width of their weights).
    input_feeding: Luong's input feeding, the previous attentional state concatenated to
        the next decoder input (Luong scores only).
    dropout: on the embeddings, between stacked recurrent layers, and before the output
        layer.
    scheduled_sampling: in training, the probability that a sequence is fed the model's own
        previous prediction (argmax) instead of the true previous token, per step (Bengio
        et al. 2015).  0 is plain teacher forcing.
    share_embeddings: one embedding table for source and target (needs one vocabulary).
    pad_id: the padding token id (never attended, never read by the encoder).
    max_len: the longest target a caller should generate by default (an RNN has no
        position table, so the model itself imposes no limit).
    """

    source_vocab_size: int
    target_vocab_size: int | None = None
    embedding_dim: int = 256
    hidden_dim: int = 256
    num_layers: int = 1
    cell: str = "gru"
    attention: str | None = None
    attention_dim: int | None = None
    input_feeding: bool = False
    dropout: float = 0.1
    scheduled_sampling: float = 0.0
    share_embeddings: bool = False
    pad_id: int = 0
    max_len: int = 256

    def __post_init__(self) -> None:
        if self.target_vocab_size is None:
            object.__setattr__(self, "target_vocab_size", self.source_vocab_size)
        check_positive_ints(
            self,
            (
                "source_vocab_size",
                "target_vocab_size",
                "embedding_dim",
                "hidden_dim",
                "num_layers",
                "max_len",
                "attention_dim",  # optional: None means hidden_dim
            ),
        )
        if self.cell not in CELLS:
            raise ValueError(f"cell={self.cell!r} is not one of {CELLS}")
        known = [*available_scores(), *(d for d in available_decoders() if d != "additive")]
        if self.attention is not None and self.attention not in known:
            raise ValueError(
                f"attention={self.attention!r} is not a known score; choose from {known} "
                "(or register_score() / register_decoder() a new one)"
            )
        if not isinstance(self.input_feeding, bool):
            raise TypeError(f"input_feeding={self.input_feeding!r} must be a bool")
        if self.input_feeding and self.attention in ("additive", NO_ATTENTION):
            raise ValueError(
                f"input_feeding=True is Luong's and needs a Luong score such as 'dot' or "
                f"'general', got attention={self.attention!r} (the additive decoder already "
                "feeds its context into the recurrent step); set input_feeding=False"
            )
        check_dropout(self.dropout)
        if not 0.0 <= self.scheduled_sampling <= 1.0:
            raise ValueError(
                f"scheduled_sampling={self.scheduled_sampling} is a probability, in [0, 1]"
            )
        check_vocabularies(self)

    def replace(self, **changes: Any) -> RNNConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
