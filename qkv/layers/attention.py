"""The general attention layer of SPEC section 1: queries attend over a set of inputs."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..functional import masked_softmax
from .scores import make_score

__all__ = ["Attention", "AttentionMemory"]


class AttentionMemory(NamedTuple):
    """The inputs made ready to be attended: keys prepared by the score, and values.

    prepared_keys (B, Tk, *), values (B, Tk, Dv).  Batch-first, so a decoder state holding
    it can be reordered for beam search."""

    prepared_keys: Tensor
    values: Tensor


class Attention(nn.Module):
    r"""z_i = sum_j alpha_ij v_j with alpha_ij = softmax_j(score(q_i, k_j)), k = W_K x, v = W_V x.

    $$z_i = \sum_j \alpha_{ij}\, W_V x_j,\qquad
    \alpha_{ij} = \mathrm{softmax}_j\big(a(q_i, W_K x_j)\big)$$

    Keys and values are separate projections of the inputs x: one decides *how relevant*,
    the other *what is passed on*.  ``key_dim=None`` / ``value_dim=None`` use x itself
    (as Bahdanau and Luong attend over the encoder states directly).

    Shapes: query (B, Tq, Dq), inputs (B, Tk, Din), mask broadcastable to (B, Tq, Tk)
    (boolean, True = may attend) -> output (B, Tq, Dv), weights (B, Tq, Tk).
    """

    def __init__(
        self,
        *,
        query_dim: int,
        input_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        score: str = "additive",
        hidden_dim: int | None = None,
    ):
        super().__init__()
        self.key_proj = nn.Linear(input_dim, key_dim, bias=False) if key_dim else nn.Identity()
        self.value_proj = (
            nn.Linear(input_dim, value_dim, bias=False) if value_dim else nn.Identity()
        )
        self.score = make_score(
            score, query_dim=query_dim, key_dim=key_dim or input_dim, hidden_dim=hidden_dim
        )
        self.input_dim = input_dim
        self.value_dim = value_dim or input_dim

    def memory(self, inputs: Tensor) -> AttentionMemory:
        """Project and prepare the inputs once; reuse across decoding steps."""
        if inputs.dim() != 3 or inputs.shape[-1] != self.input_dim:
            raise ValueError(f"inputs must be (B, Tk, {self.input_dim}), got {tuple(inputs.shape)}")
        if inputs.shape[1] == 0:
            raise ValueError("inputs are empty (Tk=0): there is nothing to attend to")
        return AttentionMemory(self.score.prepare(self.key_proj(inputs)), self.value_proj(inputs))

    def attend(
        self, query: Tensor, memory: AttentionMemory, *, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend with ready memory.  Returns (output (B, Tq, Dv), weights (B, Tq, Tk))."""
        if query.dim() != 3:
            raise ValueError(f"query must be (B, Tq, Dq), got {tuple(query.shape)}")
        scores = self.score.score(query, memory.prepared_keys)  # (B, Tq, Tk)
        if mask is not None:
            if mask.dtype != torch.bool:
                raise TypeError(f"mask must be boolean (True = may attend), got {mask.dtype}")
            if mask.dim() != 3:
                raise ValueError(
                    f"mask must broadcast to (B, Tq, Tk) with 3 dims, got {tuple(mask.shape)}"
                )
        weights = masked_softmax(scores, mask)  # (B, Tq, Tk)
        return weights @ memory.values, weights  # (B, Tq, Dv)

    def forward(
        self, query: Tensor, inputs: Tensor, *, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The context of each query and its weights: ``attend(query, memory(inputs))``."""
        return self.attend(query, self.memory(inputs), mask=mask)
