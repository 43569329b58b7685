"""The recurrent encoder-decoder translator with attention (SPEC section 7), and the same
network without attention as a baseline.

source ids -> embeddings -> bidirectional GRU/LSTM (packed: padding is never read)
    -> encoder states h_1..h_n (B, S, 2H) and each layer's final [forward; backward] state
decoder initial state s_0 = tanh(W_s [final forward; final backward]) per layer
target ids -> embeddings -> decoder (Bahdanau, Luong or none; see ``rnn_decoders``)
    -> features (B, T, H) -> output layer -> next-token logits (B, T, V)

Model types: "rnn-attention" (:class:`RNNTranslator`, additive attention unless the config
names another score) and "rnn" (:class:`RNNBaseline`, ``attention="none"``).  Both
implement the :class:`~qkv.models.base.Decodable` protocol; decoding runs the encoder and
prepares the attention keys once per sentence in ``start``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.layers.recurrent import BidirectionalEncoder, EncoderStates

from .base import Seq2SeqOutput, StepOutput
from .checks import check_token_ids
from .registry import register_model
from .rnn_config import NO_ATTENTION, RNNConfig
from .rnn_decoder_registry import build_decoder
from .rnn_decoders import DecoderOutput, RNNState

__all__ = ["RNNTranslator", "RNNBaseline", "RNNConfig", "RNNState"]


class RNNTranslator(nn.Module):
    """Bidirectional recurrent encoder, attentional recurrent decoder.

    ``model(source, target_input)`` -> :class:`Seq2SeqOutput` with logits (B, T, V);
    ``start`` / ``step`` implement the :class:`~qkv.models.base.Decodable` protocol.
    ``config.attention=None`` means "additive" (Bahdanau).
    """

    default_attention = "additive"

    def __init__(self, config: RNNConfig):
        super().__init__()
        if not isinstance(config, RNNConfig):
            raise TypeError(
                f"{type(self).__name__} needs an RNNConfig, got {type(config).__name__}"
            )
        self.config = config = self._resolve(config)
        embedding_dim, hidden_dim, pad_id = config.embedding_dim, config.hidden_dim, config.pad_id
        self.source_embedding = nn.Embedding(
            config.source_vocab_size, embedding_dim, padding_idx=pad_id
        )
        self.target_embedding = (
            self.source_embedding
            if config.share_embeddings
            else nn.Embedding(config.target_vocab_size, embedding_dim, padding_idx=pad_id)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = BidirectionalEncoder(
            input_dim=embedding_dim,
            hidden_dim=hidden_dim,
            num_layers=config.num_layers,
            cell=config.cell,
            dropout=config.dropout,
        )
        # SPEC 7: the decoder starts from a fully-connected layer of the encoder's final state.
        self.bridge = _layerwise_linear(config, 2 * hidden_dim, hidden_dim)
        self.cell_bridge = (
            _layerwise_linear(config, 2 * hidden_dim, hidden_dim) if config.cell == "lstm" else None
        )
        self.decoder = build_decoder(config, context_dim=self.encoder.output_dim)
        self.output = nn.Linear(hidden_dim, config.target_vocab_size)

    def _resolve(self, config: RNNConfig) -> RNNConfig:
        if config.attention is None:
            return config.replace(attention=self.default_attention)
        if config.attention == NO_ATTENTION:
            raise ValueError(
                "attention='none' is the baseline without attention: build RNNBaseline "
                "(model type 'rnn') instead of RNNTranslator ('rnn-attention')"
            )
        return config

    # -- encoding -----------------------------------------------------------------------------

    def encode(self, source: Tensor) -> tuple[EncoderStates, Tensor]:
        """Read right-padded sources.  Shapes: source (B, S) token ids -> encoder states
        (outputs (B, S, 2H), final hidden (B, L, 2H)), source_mask (B, 1, S) True = real."""
        real = _check_source(source, self.config.pad_id)  # (B, S)
        embedded = self.dropout(self.source_embedding(source))  # (B, S, E)
        states = self.encoder(embedded, real.sum(dim=1))
        return states, real[:, None, :]

    def start(self, source: Tensor) -> RNNState:
        """Encode once, prepare the attention memory once, make the initial decoder state.
        Shapes: source (B, S) token ids."""
        states, source_mask = self.encode(source)
        hidden = _apply_layerwise(self.bridge, states.hidden)  # (B, L, H)
        cell = None if self.cell_bridge is None else _apply_layerwise(self.cell_bridge, states.cell)
        return self.decoder.start(states, hidden, cell, source_mask)

    # -- teacher forcing ----------------------------------------------------------------------

    def forward(
        self, source: Tensor, target_input: Tensor, *, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Shapes: source (B, S), target_input (B, T) token ids -> logits (B, T, V).

        ``need_weights``: attention = {"cross": [alpha (B, T, S)]} (None for the baseline).
        In training with ``config.scheduled_sampling = p > 0``, at each step after the first
        each sequence is fed its own previous argmax instead of the true token with
        probability p.
        """
        check_token_ids(target_input, "target_input")
        state = self.start(source)
        if target_input.shape[0] != state.hidden.shape[0]:
            raise ValueError(
                f"source and target_input have different batch sizes: "
                f"{state.hidden.shape[0]} and {target_input.shape[0]}"
            )
        embedded = self.dropout(self.target_embedding(target_input))  # (B, T, E)
        sampling = self.training and self.config.scheduled_sampling > 0
        if self.decoder.parallel and not sampling:
            out = self.decoder(embedded, state)
            logits, weights = self.output(self.dropout(out.features)), out.weights
        else:
            logits, weights = self._decode_stepwise(embedded, state, sampling=sampling)
        attention = None
        if need_weights and weights is not None:
            attention = {"cross": [weights]}
        return Seq2SeqOutput(logits, attention)

    def _decode_stepwise(
        self, embedded: Tensor, state: RNNState, *, sampling: bool
    ) -> tuple[Tensor, Tensor | None]:
        """One decoder step per target position.  Shapes: embedded (B, T, E) ->
        logits (B, T, V), weights (B, T, S) or None."""
        batch_size, length = embedded.shape[:2]
        outputs: list[Tensor] = []  # per step: logits (B, 1, V) if sampling, else features
        weights: list[Tensor] = []
        for t in range(length):
            inputs = embedded[:, t : t + 1]  # (B, 1, E)
            if sampling and t > 0:
                own = self.dropout(self.target_embedding(outputs[-1].argmax(dim=-1)))  # (B, 1, E)
                coins = torch.rand(batch_size, 1, 1, device=embedded.device)
                inputs = torch.where(coins < self.config.scheduled_sampling, own, inputs)
            out: DecoderOutput = self.decoder(inputs, state)
            state = out.state
            if sampling:  # the next step feeds on this step's prediction
                outputs.append(self.output(self.dropout(out.features)))
            else:
                outputs.append(out.features)
            if out.weights is not None:
                weights.append(out.weights)  # (B, 1, S)
        stacked = torch.cat(outputs, dim=1)
        # without sampling, one output projection over all steps: one large matmul, not T small
        logits = stacked if sampling else self.output(self.dropout(stacked))  # (B, T, V)
        return logits, torch.cat(weights, dim=1) if weights else None

    # -- incremental decoding (the Decodable protocol) ----------------------------------------

    def step(self, tokens: Tensor, state: RNNState, *, need_attention: bool = True) -> StepOutput:
        """Consume one token per sequence; score the next.  Returns a new state (the given
        one is left unchanged).  Shapes: tokens (B,) -> log_probs (B, V), attention (B, S)
        (None for the baseline; returned even when not needed, as the step computes it)."""
        if tokens.dim() != 1:
            raise ValueError(f"step takes one token per sequence, (B,), got {tuple(tokens.shape)}")
        if not isinstance(state, RNNState):
            raise TypeError(
                f"state must come from {type(self).__name__}.start, got {type(state).__name__}"
            )
        embedded = self.dropout(self.target_embedding(tokens[:, None]))  # (B, 1, E)
        out = self.decoder(embedded, state)
        logits = self.output(self.dropout(out.features[:, 0]))  # (B, V)
        attention = None if out.weights is None else out.weights[:, 0]
        return StepOutput(F.log_softmax(logits.float(), dim=-1), out.state, attention)


class RNNBaseline(RNNTranslator):
    """The same encoder-decoder without attention (Sutskever et al. 2014; Cho et al. 2014):
    the decoder sees the source only through the encoder's final state, as its initial
    state and as a fixed context at every step.  ``config.attention`` must be None or
    "none"."""

    default_attention = NO_ATTENTION

    def _resolve(self, config: RNNConfig) -> RNNConfig:
        if config.attention not in (None, NO_ATTENTION):
            raise ValueError(
                f"RNNBaseline ('rnn') has no attention, got attention={config.attention!r}; "
                "build RNNTranslator ('rnn-attention') to use a score"
            )
        return config.replace(attention=NO_ATTENTION)


def _layerwise_linear(config: RNNConfig, in_features: int, out_features: int) -> nn.ModuleList:
    return nn.ModuleList(nn.Linear(in_features, out_features) for _ in range(config.num_layers))


def _apply_layerwise(layers: nn.ModuleList, states: Tensor) -> Tensor:
    """tanh(W_l x_l) for each layer l.  Shapes: (B, L, 2H) -> (B, L, H)."""
    return torch.stack([layer(states[:, i]) for i, layer in enumerate(layers)], dim=1).tanh()


def _check_source(source: Tensor, pad_id: int) -> Tensor:
    """Returns which positions are real tokens, (B, S), after checking the padding."""
    check_token_ids(source, "source")
    real = source != pad_id  # (B, S)
    lengths = real.sum(dim=1)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"source rows {empty} hold only padding (pad_id={pad_id}); every source needs at "
            "least one real token"
        )
    positions = torch.arange(source.shape[1], device=source.device)
    if not torch.equal(real, positions[None, :] < lengths[:, None]):
        raise ValueError(
            f"source must be right-padded: pad_id={pad_id} may only follow the last real token"
        )
    return real


#: The additive score's hidden layer of the RNN translators (Bahdanau's decoder).
_ADDITIVE_KEYS = "decoder.attention.score.key_proj.weight"


def _upgrade(config: dict, shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """A config saved before 2026-12-01, when ``attention_dim=None`` built a score as wide as
    the encoder states (2H), gets the width its weights have (None means H now)."""
    if config.get("attention_dim") is None:
        shape = shapes.get(_ADDITIVE_KEYS)
        if shape and shape[0] != config.get("hidden_dim"):
            config["attention_dim"] = shape[0]
    return config


register_model("rnn-attention", RNNConfig, RNNTranslator, upgrade=_upgrade)
register_model("rnn", RNNConfig, RNNBaseline, upgrade=_upgrade)
