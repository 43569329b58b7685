"""The three decoders of the recurrent translator, one component each (SPEC section 7).

* :class:`BahdanauDecoder` (Bahdanau et al. 2015): the alignment compares the *previous*
  state s_{t-1} with every encoder state h_j; the context c_t = sum_j alpha_tj h_j enters
  the recurrent step with the previous token; the output reads [s_t; c_t; y_{t-1}].
* :class:`LuongDecoder` (Luong et al. 2015): the recurrent step runs first; the alignment
  compares the *current* state h_t with every h_j; the attentional state
  h~_t = tanh(W_c [c_t; h_t]) feeds the output (and, with input feeding, the next input).
* :class:`ContextDecoder`, the baseline (Sutskever et al. 2014; Cho et al. 2014): no
  attention; the encoder's final state is a fixed context c read at every step, in the
  same places and with the same sizes as Bahdanau's c_t, so only the attention differs.

Every score is the core's, through the generic :class:`~qkv.layers.Attention` layer.
``RNNConfig.attention`` picks one from the registry of :mod:`.rnn_decoder_registry`.
A decoder consumes embedded target tokens (B, T, E) and returns features (B, T, H) for the
output layer.  ``parallel`` says whether it can consume a whole teacher-forced target at
once; otherwise it takes one step (T = 1) per call.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from qkv.layers.attention import Attention, AttentionMemory
from qkv.layers.recurrent import EncoderStates, make_recurrent, run_recurrent

from .rnn_cells import cell_weights, step_cells

__all__ = [
    "RNNState",
    "DecoderOutput",
    "RecurrentDecoder",
    "BahdanauDecoder",
    "LuongDecoder",
    "ContextDecoder",
]


@dataclass
class RNNState:
    """What decoding carries from step to step; every tensor is batch-first, so
    ``qkv.models.select_state`` reorders it (beam search).

    hidden: (B, L, H) the decoder's recurrent state per layer; cell: (B, L, H) for an LSTM.
    source_mask: (B, 1, S) True = a real source token (may be attended).
    memory: the encoder states prepared once for the score (keys) and as values.
    context: (B, 1, 2H) the baseline's fixed context; feed: (B, 1, H) Luong's h~_{t-1}.
    """

    hidden: Tensor
    cell: Tensor | None
    source_mask: Tensor
    memory: AttentionMemory | None = None
    context: Tensor | None = None
    feed: Tensor | None = None


class DecoderOutput(NamedTuple):
    """features: (B, T, H) for the output layer; weights: (B, T, S) alignment, or None."""

    features: Tensor
    state: RNNState
    weights: Tensor | None


class RecurrentDecoder(nn.Module, abc.ABC):
    """A decoder: ``start`` from the encoder's states, then ``forward`` over target tokens.

    Shapes: encoder outputs (B, S, 2H); embedded targets (B, T, E) -> features (B, T, H).
    """

    parallel: bool = False

    @abc.abstractmethod
    def start(
        self, encoded: EncoderStates, hidden: Tensor, cell: Tensor | None, source_mask: Tensor
    ) -> RNNState:
        """The state before the first target token, from the initial recurrent state."""

    @abc.abstractmethod
    def forward(self, embedded: Tensor, state: RNNState) -> DecoderOutput:
        """Consume embedded target tokens (B, T, E) (T = 1 unless ``parallel``)."""

    def _check_one_step(self, embedded: Tensor) -> None:
        if embedded.shape[1] != 1:
            raise ValueError(
                f"{type(self).__name__} feeds each step's result into the next step, so it "
                f"takes one token per call, got T={embedded.shape[1]}"
            )


class BahdanauDecoder(RecurrentDecoder):
    """s_t = RNN([E y_{t-1}; c_t], s_{t-1}) with c_t = attend(s_{t-1}, h);
    features = tanh(W_o [s_t; c_t; E y_{t-1}]).

    Each context depends on the previous state, so the recurrence runs one step at a time,
    and only what must: the keys W_k h_j are prepared once in ``start``, the padding mask
    becomes an additive bias once per call, each step is one GRU/LSTM cell kernel per layer
    (``rnn_cells``; the parameters stay ``nn.GRU``'s), and the readout of all steps is one
    matmul after the loop.  ``parallel``: a whole teacher-forced target goes through one
    call (the steps loop inside it).
    """

    parallel = True

    def __init__(
        self,
        *,
        embedding_dim: int,
        hidden_dim: int,
        context_dim: int,
        num_layers: int,
        cell: str,
        dropout: float,
        attention_dim: int | None = None,
    ):
        super().__init__()
        input_dim = embedding_dim + context_dim
        self.rnn = make_recurrent(
            cell, input_dim=input_dim, hidden_dim=hidden_dim, num_layers=num_layers, dropout=dropout
        )
        self.attention = Attention(
            query_dim=hidden_dim, input_dim=context_dim, score="additive", hidden_dim=attention_dim
        )
        self.readout = nn.Linear(hidden_dim + input_dim, hidden_dim)

    def start(
        self, encoded: EncoderStates, hidden: Tensor, cell: Tensor | None, source_mask: Tensor
    ) -> RNNState:
        return RNNState(hidden, cell, source_mask, memory=self.attention.memory(encoded.outputs))

    def forward(self, embedded: Tensor, state: RNNState) -> DecoderOutput:
        keys, values = state.memory  # W_k h_j + b: (B, S, A); h_j: (B, S, 2H)
        score = self.attention.score
        # Every source holds a real token (the model checks), so no row is fully masked and
        # a plain softmax over scores + bias is the masked softmax.
        bias = torch.zeros(state.source_mask.shape, dtype=keys.dtype, device=keys.device)
        bias.masked_fill_(~state.source_mask, float("-inf"))  # (B, 1, S)
        hidden = list(state.hidden.unbind(1))  # L x (B, H)
        cell = None if state.cell is None else list(state.cell.unbind(1))
        layers = cell_weights(self.rnn)
        outputs, contexts, weights = [], [], []
        # unbind, not embedded[:, t]: the backward of T slices would each zero-fill (B, T, E)
        for step_embedded in embedded.unbind(1):  # (B, E)
            previous = hidden[-1][:, None]  # s_{t-1}, the top layer: (B, 1, H)
            alpha = torch.softmax(score.score(previous, keys) + bias, dim=-1)  # (B, 1, S)
            context = alpha @ values  # (B, 1, 2H)
            inputs = torch.cat([step_embedded, context[:, 0]], dim=-1)  # (B, E + 2H)
            hidden, cell = step_cells(self.rnn, layers, inputs, hidden, cell)
            outputs.append(hidden[-1])
            contexts.append(context)
            weights.append(alpha)
        output = torch.stack(outputs, dim=1)  # (B, T, H)
        context = torch.cat(contexts, dim=1)  # (B, T, 2H)
        features = self.readout(torch.cat([output, context, embedded], dim=-1)).tanh()
        new_state = dataclasses.replace(
            state,
            hidden=torch.stack(hidden, dim=1),
            cell=None if cell is None else torch.stack(cell, dim=1),
        )
        return DecoderOutput(features, new_state, torch.cat(weights, dim=1))


class LuongDecoder(RecurrentDecoder):
    """h_t = RNN(E y_{t-1} [; h~_{t-1}], h_{t-1}); c_t = attend(h_t, h);
    h~_t = tanh(W_c [c_t; h_t]) are the features."""

    def __init__(
        self,
        *,
        score: str,
        embedding_dim: int,
        hidden_dim: int,
        context_dim: int,
        num_layers: int,
        cell: str,
        dropout: float,
        input_feeding: bool = False,
    ):
        super().__init__()
        self.rnn = make_recurrent(
            cell,
            input_dim=embedding_dim + (hidden_dim if input_feeding else 0),
            hidden_dim=hidden_dim,
            num_layers=num_layers,
            dropout=dropout,
        )
        # Dot scores need keys as wide as the query: project the 2H-wide encoder states to
        # H-wide keys (k = W_K h); the values stay the encoder states themselves.
        project_keys = score in ("dot", "scaled_dot") and context_dim != hidden_dim
        self.attention = Attention(
            query_dim=hidden_dim,
            input_dim=context_dim,
            key_dim=hidden_dim if project_keys else None,
            score=score,
        )
        self.combine = nn.Linear(context_dim + hidden_dim, hidden_dim, bias=False)  # W_c
        self.input_feeding = input_feeding
        self.parallel = not input_feeding

    def start(
        self, encoded: EncoderStates, hidden: Tensor, cell: Tensor | None, source_mask: Tensor
    ) -> RNNState:
        memory = self.attention.memory(encoded.outputs)
        feed = hidden.new_zeros(hidden.shape[0], 1, hidden.shape[2]) if self.input_feeding else None
        return RNNState(hidden, cell, source_mask, memory=memory, feed=feed)

    def forward(self, embedded: Tensor, state: RNNState) -> DecoderOutput:
        inputs = embedded
        if self.input_feeding:
            self._check_one_step(embedded)
            inputs = torch.cat([embedded, state.feed], dim=-1)  # (B, 1, E + H)
        output, hidden, cell = run_recurrent(self.rnn, inputs, state.hidden, state.cell)
        context, weights = self.attention.attend(output, state.memory, mask=state.source_mask)
        features = self.combine(torch.cat([context, output], dim=-1)).tanh()  # (B, T, H)
        feed = features if self.input_feeding else None
        new_state = dataclasses.replace(state, hidden=hidden, cell=cell, feed=feed)
        return DecoderOutput(features, new_state, weights)


class ContextDecoder(RecurrentDecoder):
    """No attention: s_t = RNN([E y_{t-1}; c], s_{t-1}) with c the encoder's final state
    (top layer, [forward; backward]) at every step; features = tanh(W_o [s_t; c; E y_{t-1}])."""

    parallel = True

    def __init__(
        self,
        *,
        embedding_dim: int,
        hidden_dim: int,
        context_dim: int,
        num_layers: int,
        cell: str,
        dropout: float,
    ):
        super().__init__()
        input_dim = embedding_dim + context_dim
        self.rnn = make_recurrent(
            cell, input_dim=input_dim, hidden_dim=hidden_dim, num_layers=num_layers, dropout=dropout
        )
        self.readout = nn.Linear(hidden_dim + input_dim, hidden_dim)

    def start(
        self, encoded: EncoderStates, hidden: Tensor, cell: Tensor | None, source_mask: Tensor
    ) -> RNNState:
        return RNNState(hidden, cell, source_mask, context=encoded.hidden[:, -1:])  # (B, 1, 2H)

    def forward(self, embedded: Tensor, state: RNNState) -> DecoderOutput:
        context = state.context.expand(-1, embedded.shape[1], -1)  # (B, T, 2H)
        inputs = torch.cat([embedded, context], dim=-1)
        output, hidden, cell = run_recurrent(self.rnn, inputs, state.hidden, state.cell)
        features = self.readout(torch.cat([output, context, embedded], dim=-1)).tanh()
        return DecoderOutput(features, dataclasses.replace(state, hidden=hidden, cell=cell), None)
