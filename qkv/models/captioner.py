"""The image captioner with soft attention over image regions (SPEC section 8; Xu et al.
2015, "Show, Attend and Tell"), and the same network without attention as a baseline.

images (B, 3, H, W) in [0, 1] -> CNN -> regions a_1..a_P (B, P, D)
h_0, c_0 = tanh(W_h mean_p a_p), tanh(W_c mean_p a_p)
at each step t, reading the previous word y_{t-1}:
    alpha_t = softmax_p score(h_{t-1}, a_p)            attention over the regions (B, P)
    z_t = beta_t * sum_p alpha_tp a_p,  beta_t = sigmoid(w_beta . h_{t-1} + b)
    h_t, c_t = LSTM([E y_{t-1}; z_t], (h_{t-1}, c_{t-1}))
    logits_t = L_o dropout(tanh(E y_{t-1} + L_h h_t + L_z z_t))     the deep output
The baseline (``attention=False``) uses z_t = beta_t * mean_p a_p at every step; both are
components (``captioner_context``: :class:`AttendedRegions` or :class:`MeanRegion`, and
:class:`ContextGate` or :class:`NoGate`), chosen once when the model is built.

Training adds the doubly stochastic regulariser lambda * sum_p (1 - sum_t alpha_tp)^2
(each region looked at about once over a caption) as ``Seq2SeqOutput.aux_loss``.  The
trainer adds ``aux_loss`` to the *per-token* mean cross-entropy, whereas the paper adds
lambda * penalty to the cross-entropy *summed* over a caption's words; so that lambda means
what it means in the paper, ``aux_loss`` is the batch's summed penalty divided by its number
of predicted tokens: lambda * sum_b penalty_b / sum_b T_b.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.layers.attention import AttentionMemory

from .base import Seq2SeqOutput, StepOutput
from .captioner_config import CaptionerConfig
from .captioner_context import AttendedRegions, ContextGate, MeanRegion, NoGate
from .captioner_encoder import build_region_encoder
from .checks import check_config, check_token_ids
from .registry import register_model

__all__ = [
    "Captioner",
    "CaptionerConfig",
    "CaptionerState",
    "CaptionerDecoding",
    "doubly_stochastic_penalty",
]


@dataclass
class CaptionerState:
    """What decoding carries from step to step; every tensor is batch-first, so
    ``qkv.models.select_state`` reorders it (beam search).

    hidden, cell: (B, H) the LSTM state.  memory: the regions prepared once for the score
    (keys) and as values (B, P, D); None for the baseline.  mean_region: (B, D)."""

    hidden: Tensor
    cell: Tensor
    memory: AttentionMemory | None
    mean_region: Tensor


class CaptionerDecoding(NamedTuple):
    """A teacher-forced pass in full.  logits (B, T, V); weights (B, T, P) the attention
    over the regions (None for the baseline); gates (B, T) beta_t (ones without the gate);
    steps (B, T) True where the step predicts a real token (its input is neither pad nor
    end)."""

    logits: Tensor
    weights: Tensor | None
    gates: Tensor
    steps: Tensor


def doubly_stochastic_penalty(weights: Tensor, steps: Tensor) -> Tensor:
    """The paper's sum_p (1 - sum_t alpha_tp)^2 per image, over the real steps only.

    Shapes: weights (B, T, P), steps (B, T) bool -> (B,)."""
    if weights.dim() != 3 or steps.shape != weights.shape[:2]:
        raise ValueError(
            f"weights must be (B, T, P) and steps (B, T); got {tuple(weights.shape)} and "
            f"{tuple(steps.shape)}"
        )
    looked = (weights * steps[:, :, None].to(weights.dtype)).sum(dim=1)  # (B, P)
    return ((1.0 - looked) ** 2).sum(dim=-1)


class Captioner(nn.Module):
    """CNN encoder, LSTM decoder attending over the image regions at every word.

    ``model(images, target_input)`` -> :class:`Seq2SeqOutput` with logits (B, T, V);
    ``start`` / ``step`` implement the :class:`~qkv.models.base.Decodable` protocol.
    """

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        check_config(self, config, CaptionerConfig)
        self.config = config
        feature_dim, hidden_dim, embedding_dim = (
            config.feature_dim,
            config.hidden_dim,
            config.embedding_dim,
        )
        self.encoder = build_region_encoder(config)
        self.embedding = nn.Embedding(config.vocab_size, embedding_dim, padding_idx=config.pad_id)
        self.init_hidden = nn.Linear(feature_dim, hidden_dim)
        self.init_cell = nn.Linear(feature_dim, hidden_dim)
        self.attention = _context_source(config)
        self.gate = ContextGate(hidden_dim) if config.gate else NoGate()
        self.lstm = nn.LSTMCell(embedding_dim + feature_dim, hidden_dim)
        self.output_hidden = nn.Linear(hidden_dim, embedding_dim)  # L_h
        self.output_context = nn.Linear(feature_dim, embedding_dim)  # L_z
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(embedding_dim, config.vocab_size)  # L_o

    # -- encoding -----------------------------------------------------------------------------

    def encode(self, images: Tensor) -> Tensor:
        """Shapes: images (B, 3, H, W) floats in [0, 1] -> regions (B, P, D).  Region
        features (B, P, D) that this encoder computed before (the frozen encoder's cache)
        pass through as they are."""
        if images.dim() == 3:
            expected = (self.config.num_regions, self.config.feature_dim)
            if tuple(images.shape[1:]) != expected or not images.is_floating_point():
                raise ValueError(
                    f"region features must be float (B, {expected[0]}, {expected[1]}), "
                    f"got {images.dtype} {tuple(images.shape)}"
                )
            return images
        return self.encoder(images)

    def start(self, images: Tensor) -> CaptionerState:
        """Encode once, prepare the attention memory once, make h_0 and c_0.
        Shapes: images (B, 3, H, W) floats in [0, 1]."""
        return self._initial_state(self.encode(images))

    def _initial_state(self, regions: Tensor) -> CaptionerState:
        mean_region = regions.mean(dim=1)  # (B, D)
        memory = self.attention.memory(regions)
        return CaptionerState(
            hidden=self.init_hidden(mean_region).tanh(),  # (B, H)
            cell=self.init_cell(mean_region).tanh(),  # (B, H)
            memory=memory,
            mean_region=mean_region,
        )

    # -- the recurrence and the output, shared by teacher forcing and decoding ----------------

    def _recur(
        self, embedded: Tensor, state: CaptionerState
    ) -> tuple[CaptionerState, Tensor, Tensor | None, Tensor]:
        """Read E y_{t-1}; returns the new state, z_t (B, D), alpha_t (B, P) or None, and
        beta_t (B,).  Shapes: embedded (B, E)."""
        previous = state.hidden  # h_{t-1}: (B, H)
        context, weights = self.attention.read(previous, state.memory, state.mean_region)
        gate = self.gate(previous)  # beta_t: (B,)
        context = gate[:, None] * context  # z_t: (B, D)
        hidden, cell = self.lstm(torch.cat([embedded, context], dim=-1), (previous, state.cell))
        return CaptionerState(hidden, cell, state.memory, state.mean_region), context, weights, gate

    def _logits(self, embedded: Tensor, hidden: Tensor, context: Tensor) -> Tensor:
        """The deep output L_o tanh(E y_{t-1} + L_h h_t + L_z z_t), for one step or many.

        Shapes: embedded (..., E), hidden (..., H), context (..., D) -> (..., V)."""
        deep = embedded + self.output_hidden(hidden) + self.output_context(context)  # (..., E)
        return self.output(self.dropout(deep.tanh()))

    # -- teacher forcing ----------------------------------------------------------------------

    def decode_teacher_forced(self, images: Tensor, target_input: Tensor) -> CaptionerDecoding:
        """Run the decoder over the given words, returning attention and gates with the logits.

        Shapes: images (B, 3, H, W), target_input (B, T) token ids -> see
        :class:`CaptionerDecoding`."""
        check_token_ids(target_input, "target_input", unit="caption")
        if images.dim() not in (3, 4) or images.shape[0] != target_input.shape[0]:
            raise ValueError(
                f"images (B, 3, H, W) or regions (B, P, D) and target_input (B, T) must share B; got "
                f"{tuple(images.shape)} and {tuple(target_input.shape)}"
            )
        state = self.start(images)
        embedded = self.embedding(target_input)  # (B, T, E)
        hiddens, contexts, weights, gates = [], [], [], []
        for t in range(target_input.shape[1]):  # the recurrence is sequential; the output is not
            state, context, step_weights, gate = self._recur(embedded[:, t], state)
            hiddens.append(state.hidden)
            contexts.append(context)
            gates.append(gate)
            if step_weights is not None:
                weights.append(step_weights)
        logits = self._logits(embedded, torch.stack(hiddens, 1), torch.stack(contexts, 1))
        steps = (target_input != self.config.pad_id) & (target_input != self.config.eos_id)
        return CaptionerDecoding(
            logits=logits,  # (B, T, V)
            weights=torch.stack(weights, dim=1) if weights else None,  # (B, T, P)
            gates=torch.stack(gates, dim=1),  # (B, T)
            steps=steps,
        )

    def forward(
        self, images: Tensor, target_input: Tensor, *, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Shapes: images (B, 3, H, W) floats in [0, 1], target_input (B, T) token ids ->
        logits (B, T, V).

        ``need_weights``: attention = {"cross": [alpha (B, T, P)]} (None for the baseline).
        ``aux_loss``: lambda * sum_b sum_p (1 - sum_t alpha_btp)^2 / (number of predicted
        tokens), None when lambda = 0 or without attention (see the module docstring).
        """
        decoded = self.decode_teacher_forced(images, target_input)
        aux_loss = None
        if decoded.weights is not None and self.config.doubly_stochastic > 0:
            penalty = doubly_stochastic_penalty(decoded.weights, decoded.steps)  # (B,)
            tokens = decoded.steps.sum().clamp(min=1)
            aux_loss = self.config.doubly_stochastic * penalty.sum() / tokens
        attention = None
        if need_weights and decoded.weights is not None:
            attention = {"cross": [decoded.weights]}
        return Seq2SeqOutput(decoded.logits, attention, aux_loss)

    # -- incremental decoding (the Decodable protocol) ----------------------------------------

    def step(
        self, tokens: Tensor, state: CaptionerState, *, need_attention: bool = True
    ) -> StepOutput:
        """Consume one word per caption; score the next.  Returns a new state (the given one
        is left unchanged).  Shapes: tokens (B,) -> log_probs (B, V), attention (B, P) (None
        for the baseline; returned even when not needed, as the step computes it)."""
        if tokens.dim() != 1:
            raise ValueError(f"step takes one token per caption, (B,), got {tuple(tokens.shape)}")
        if not isinstance(state, CaptionerState):
            raise TypeError(f"state must come from Captioner.start, got {type(state).__name__}")
        embedded = self.embedding(tokens)  # (B, E)
        state, context, weights, _ = self._recur(embedded, state)
        logits = self._logits(embedded, state.hidden, context)  # (B, V)
        return StepOutput(F.log_softmax(logits.float(), dim=-1), state, weights)


def _context_source(config: CaptionerConfig) -> AttendedRegions | MeanRegion:
    """Attention over the regions, or the baseline's mean region (``config.attention``)."""
    if not config.attention:
        return MeanRegion()
    # Dot scores need keys as wide as the query h_{t-1}: project the regions to H.
    same_width = config.score in ("dot", "scaled_dot") and config.feature_dim != config.hidden_dim
    return AttendedRegions(
        query_dim=config.hidden_dim,
        input_dim=config.feature_dim,
        key_dim=config.hidden_dim if same_width else None,
        score=config.score,
        hidden_dim=config.attention_dim,
    )


register_model("captioner", CaptionerConfig, Captioner)
