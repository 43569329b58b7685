"""Recurrent layers, batch-first: one place that builds GRU/LSTM stacks, a bidirectional
encoder over right-padded batches, and a runner that keeps recurrent states batch-first.

PyTorch's recurrent modules hold their states as (num_layers * directions, B, H).  qkv keeps
states batch-first everywhere, (B, num_layers, H), so a decoder state can be reordered along
the batch for beam search; :func:`run_recurrent` converts at the module boundary.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = [
    "RECURRENT_CELLS",
    "make_recurrent",
    "run_recurrent",
    "EncoderStates",
    "BidirectionalEncoder",
]

RECURRENT_CELLS: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}


def make_recurrent(
    cell: str,
    *,
    input_dim: int,
    hidden_dim: int,
    num_layers: int = 1,
    dropout: float = 0.0,
    bidirectional: bool = False,
) -> nn.RNNBase:
    """A batch-first GRU or LSTM stack; ``dropout`` applies between stacked layers only."""
    if cell not in RECURRENT_CELLS:
        raise ValueError(f"cell={cell!r} is not one of {sorted(RECURRENT_CELLS)}")
    return RECURRENT_CELLS[cell](
        input_dim,
        hidden_dim,
        num_layers=num_layers,
        batch_first=True,
        dropout=dropout if num_layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


def run_recurrent(
    rnn: nn.RNNBase, inputs: Tensor, hidden: Tensor, cell: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run a unidirectional stack from batch-first states.

    Shapes: inputs (B, T, Din), hidden (B, L, H), cell (B, L, H) for an LSTM else None
    -> outputs (B, T, H) (the top layer at every step), hidden (B, L, H), cell or None.
    """
    hx: Tensor | tuple[Tensor, Tensor] = hidden.transpose(0, 1).contiguous()  # (L, B, H)
    if isinstance(rnn, nn.LSTM):
        if cell is None:
            raise ValueError("an LSTM needs its cell state as well as its hidden state")
        hx = (hx, cell.transpose(0, 1).contiguous())
    outputs, final = rnn(inputs, hx)
    if isinstance(final, tuple):
        return outputs, final[0].transpose(0, 1), final[1].transpose(0, 1)
    return outputs, final.transpose(0, 1), None


class EncoderStates(NamedTuple):
    """What a bidirectional encoder read.

    outputs: (B, S, 2H) h_j = [forward h_j; backward h_j] of the top layer, exactly zero at
        padding positions.
    hidden: (B, L, 2H) each layer's final forward state (after the last real token)
        concatenated with its final backward state (after the first token).
    cell: the same for an LSTM's cell states, else None.
    """

    outputs: Tensor
    hidden: Tensor
    cell: Tensor | None


class BidirectionalEncoder(nn.Module):
    """A bidirectional GRU/LSTM stack over right-padded sequences.

    The sequences are packed, so the states never read a padding position: a sentence gives
    the same states in any batch, with any amount of padding.

    Shapes: inputs (B, S, Din), lengths (B,) real lengths (>= 1) -> :class:`EncoderStates`.
    """

    def __init__(
        self,
        *,
        input_dim: int,
        hidden_dim: int,
        num_layers: int = 1,
        cell: str = "gru",
        dropout: float = 0.0,
    ):
        super().__init__()
        self.rnn = make_recurrent(
            cell,
            input_dim=input_dim,
            hidden_dim=hidden_dim,
            num_layers=num_layers,
            dropout=dropout,
            bidirectional=True,
        )
        self.hidden_dim = hidden_dim
        self.output_dim = 2 * hidden_dim

    def forward(self, inputs: Tensor, lengths: Tensor) -> EncoderStates:
        """The states of every position and the final states.  Shapes: inputs (B, S, Din), lengths
        (B,) -> :class:`EncoderStates`."""
        if inputs.dim() != 3:
            raise ValueError(f"inputs must be (B, S, Din), got {tuple(inputs.shape)}")
        if lengths.shape != inputs.shape[:1]:
            raise ValueError(
                f"lengths must be (B,) = ({inputs.shape[0]},), got {tuple(lengths.shape)}"
            )
        if bool((lengths < 1).any()) or bool((lengths > inputs.shape[1]).any()):
            raise ValueError(
                f"every length must be in [1, {inputs.shape[1]}], got {lengths.tolist()}"
            )
        packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_outputs, final = self.rnn(packed)  # final states come back in batch order
        outputs, _ = pad_packed_sequence(
            packed_outputs, batch_first=True, total_length=inputs.shape[1]
        )  # (B, S, 2H), zeros at padding
        if isinstance(final, tuple):
            return EncoderStates(outputs, _join_directions(final[0]), _join_directions(final[1]))
        return EncoderStates(outputs, _join_directions(final), None)


def _join_directions(final: Tensor) -> Tensor:
    """(L * 2, B, H), layer-major as PyTorch returns it -> (B, L, 2H) [forward; backward]."""
    layers_times_two, batch, width = final.shape
    layers = layers_times_two // 2
    joined = final.view(layers, 2, batch, width).permute(2, 0, 1, 3)  # (B, L, 2, H)
    return joined.reshape(batch, layers, 2 * width)
