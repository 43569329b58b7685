"""The many-to-many head: self-attention over a sequence of per-item features, then one
classification per item (a frame of a clip, a word of a sentence)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.errors import InputError

from .blocks import EncoderBlock
from .positions import SinusoidalPositionalEncoding

__all__ = ["SequenceTagger", "TaggerOutput"]


@dataclass
class TaggerOutput:
    """logits: (B, T, K) scores of every item.  attention: per block (B, H, T, T) when asked
    for, else None."""

    logits: Tensor
    attention: list[Tensor] | None = None


class SequenceTagger(nn.Module):
    """h^0_t = W_in x_t (+ the sinusoidal encoding of t when ``positions``);
    h^l = EncoderBlock_l(h^(l-1)) for l = 1..L (pre-LN self-attention + feed-forward);
    logits_t = W_out LayerNorm(h^L_t).

    Every item sees every other (padding excluded) through the blocks' self-attention, so an
    item that is hard to classify on its own (an occluded frame) can borrow evidence from its
    neighbours.  With ``num_layers=0`` it classifies each item on its own (the baseline).
    Without positions the head is permutation-equivariant: shuffling the items shuffles the
    logits the same way.

    Shapes: x (B, T, input_dim), mask (B, T) bool, True = a real item
    -> TaggerOutput(logits (B, T, num_classes), attention per block (B, H, T, T) or None).
    """

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        *,
        num_layers: int = 2,
        d_model: int = 128,
        num_heads: int = 4,
        dropout: float = 0.1,
        positions: bool = True,
    ):
        super().__init__()
        if input_dim < 1 or num_classes < 1 or num_layers < 0:
            raise InputError(
                f"input_dim={input_dim} and num_classes={num_classes} must be positive and "
                f"num_layers={num_layers} at least 0"
            )
        self.input_dim = input_dim
        self.input = nn.Linear(input_dim, d_model)
        self.positions = SinusoidalPositionalEncoding(d_model) if positions else None
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, 4 * d_model, dropout=dropout, norm_first=True)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, num_classes)

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> TaggerOutput:
        """Shapes: x (B, T, input_dim), mask (B, T) bool or None -> TaggerOutput(logits (B, T,
        num_labels), per-block weights when asked for)."""
        if x.dim() != 3 or x.shape[-1] != self.input_dim:
            raise InputError(f"x must be (B, T, {self.input_dim}), got {tuple(x.shape)}")
        if mask is not None and (
            mask.dtype != torch.bool or tuple(mask.shape) != tuple(x.shape[:2])
        ):
            raise InputError(
                f"mask must be a bool (B, T) tensor, got {mask.dtype} {tuple(mask.shape)}"
            )
        hidden = self.input(x)  # (B, T, D)
        if self.positions is not None:
            hidden = self.positions(hidden)
        keep = None if mask is None else mask[:, None, None, :]  # (B, 1, 1, T)
        weights = []
        for block in self.blocks:
            out = block(hidden, mask=keep, need_weights=need_weights)
            hidden = out.hidden
            if out.self_attention is not None:
                weights.append(out.self_attention)
        logits = self.output(self.norm(hidden))  # (B, T, K)
        return TaggerOutput(logits, weights if need_weights else None)
