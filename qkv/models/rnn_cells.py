"""A stack of recurrent cells stepped one position at a time, for decoders whose every step
depends on the previous one (Bahdanau's: the context of step t is computed from s_{t-1}).

Calling ``nn.GRU`` once per position pays, at every step, for the (L, B, H) <-> (B, L, H)
transposes of its states and for the module's sequence machinery; a ``GRUCell`` /
``LSTMCell`` per layer takes (B, Din) and (B, H) as they are.  The parameters are the same
numbers as ``nn.GRU`` / ``nn.LSTM``'s (PyTorch lays both out as [r | z | n] or
[i | f | g | o] gate blocks) under other names; :func:`rename_stacked_keys` maps a state
dict written with the stacked module onto the cells, so older checkpoints load unchanged.
"""

from __future__ import annotations

import re

from torch import Tensor, nn

__all__ = ["RecurrentCells", "rename_stacked_keys"]

CELL_TYPES: dict[str, type[nn.Module]] = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}


class RecurrentCells(nn.Module):
    """``num_layers`` GRU or LSTM cells; dropout between layers (not after the top one),
    as ``nn.GRU(dropout=...)``.

    Shapes: inputs (B, Din), hidden per layer L x (B, H), cell per layer (LSTM) or None
    -> hidden L x (B, H) (the top layer's is the step's output), cell L x (B, H) or None.
    """

    def __init__(
        self, cell: str, *, input_dim: int, hidden_dim: int, num_layers: int, dropout: float
    ):
        super().__init__()
        if cell not in CELL_TYPES:
            raise ValueError(f"cell={cell!r} is not one of {sorted(CELL_TYPES)}")
        self.layers = nn.ModuleList(
            CELL_TYPES[cell](input_dim if index == 0 else hidden_dim, hidden_dim)
            for index in range(num_layers)
        )
        self.is_lstm = cell == "lstm"
        self.dropout = nn.Dropout(dropout if num_layers > 1 else 0.0)

    def forward(
        self, inputs: Tensor, hidden: list[Tensor], cell: list[Tensor] | None
    ) -> tuple[list[Tensor], list[Tensor] | None]:
        new_hidden: list[Tensor] = []
        new_cell: list[Tensor] = []
        x = inputs
        for index, layer in enumerate(self.layers):
            if index > 0:
                x = self.dropout(x)
            if self.is_lstm:
                h, c = layer(x, (hidden[index], cell[index]))
                new_cell.append(c)
            else:
                h = layer(x, hidden[index])
            new_hidden.append(h)
            x = h
        return new_hidden, new_cell if self.is_lstm else None


_STACKED_KEY = re.compile(r"(weight|bias)_(ih|hh)_l(\d+)$")


def rename_stacked_keys(state_dict: dict, old_prefix: str, new_prefix: str) -> None:
    """In place: ``{old_prefix}weight_ih_l0`` (``nn.GRU``/``nn.LSTM``) ->
    ``{new_prefix}layers.0.weight_ih`` (:class:`RecurrentCells`), for every gate tensor."""
    for key in [k for k in state_dict if k.startswith(old_prefix)]:
        match = _STACKED_KEY.fullmatch(key[len(old_prefix) :])
        if match:
            kind, side, layer = match.groups()
            state_dict[f"{new_prefix}layers.{layer}.{kind}_{side}"] = state_dict.pop(key)
