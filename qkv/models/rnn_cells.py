"""Stepping a GRU/LSTM stack one position at a time, for decoders whose every step depends
on the previous one (Bahdanau's: the context of step t is computed from s_{t-1}).

Calling ``nn.GRU`` once per position pays, at every step, for the (L, B, H) <-> (B, L, H)
transposes of its states and for the module's sequence machinery.  Here the stack's own
parameters (so checkpoints, initialisation and ``nn.GRU``'s names are unchanged) drive the
single-step kernels that ``nn.GRUCell`` / ``nn.LSTMCell`` run (``torch.gru_cell`` /
``torch.lstm_cell``), on (B, Din) inputs and (B, H) states as they are.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["CellWeights", "cell_weights", "step_cells"]


class CellWeights(NamedTuple):
    """One layer's weights, as ``nn.GRU`` / ``nn.LSTM`` lay them out (gate blocks
    [r | z | n] or [i | f | g | o]).  Shapes: ih (G*H, Din), hh (G*H, H), biases (G*H,)."""

    ih: Tensor
    hh: Tensor
    bias_ih: Tensor | None
    bias_hh: Tensor | None


def cell_weights(rnn: nn.RNNBase) -> list[CellWeights]:
    """Every layer's weights of a unidirectional stack (gather them once, outside the loop)."""
    if rnn.bidirectional or not isinstance(rnn, (nn.GRU, nn.LSTM)):
        raise ValueError(f"expected a unidirectional nn.GRU or nn.LSTM, got {rnn}")
    return [
        CellWeights(
            getattr(rnn, f"weight_ih_l{layer}"),
            getattr(rnn, f"weight_hh_l{layer}"),
            getattr(rnn, f"bias_ih_l{layer}", None),
            getattr(rnn, f"bias_hh_l{layer}", None),
        )
        for layer in range(rnn.num_layers)
    ]


def step_cells(
    rnn: nn.RNNBase,
    weights: list[CellWeights],
    inputs: Tensor,
    hidden: list[Tensor],
    cell: list[Tensor] | None,
) -> tuple[list[Tensor], list[Tensor] | None]:
    """One position through the stack: what ``rnn`` computes for a length-1 input, dropout
    between layers (not after the top one) included.

    Shapes: inputs (B, Din), hidden L x (B, H), cell L x (B, H) for an LSTM else None
    -> hidden L x (B, H) (the top layer's is the step's output), cell or None."""
    lstm = isinstance(rnn, nn.LSTM)
    new_hidden: list[Tensor] = []
    new_cell: list[Tensor] = []
    x = inputs
    for layer, w in enumerate(weights):
        if layer > 0 and rnn.dropout > 0:
            x = F.dropout(x, rnn.dropout, rnn.training)
        if lstm:
            h, c = torch.lstm_cell(x, (hidden[layer], cell[layer]), *w)
            new_cell.append(c)
        else:
            h = torch.gru_cell(x, hidden[layer], *w)
        new_hidden.append(h)
        x = h
    return new_hidden, new_cell if lstm else None
