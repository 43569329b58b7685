"""The toy family's model: one self-attention layer over digit strings, mean-pooled into a
class.  Small enough to train in a few steps on a CPU, and its attention is real (the
weights the page shows are the ones that made the prediction)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.functional import attention_with_weights, merge_heads, padding_mask, split_heads
from qkv.models.base import LMOutput
from qkv.models.registry import register_model

#: The toy's model type (its checkpoints' kind).
TOY_MODEL = "toy-digits"
PAD = 0  # id 0 pads; digit d is id d + 1


@dataclass(frozen=True)
class ToyConfig:
    """num_classes: labels of a string; max_len: the longest string; the rest: sizes."""

    num_classes: int = 2
    d_model: int = 16
    num_heads: int = 2
    max_len: int = 12
    num_layers: int = 1  # the page's facts read it (one attention layer)


class ToyClassifier(nn.Module):
    """Digits -> class.  Shapes: source (B, S) ids -> logits (B, 1, C + 1) (id c + 1 is class
    c, as the trainer's targets ``<s> c+1`` say); attention {"self": [(B, H, S, S)]}."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        D = config.d_model
        self.embed = nn.Embedding(11, D, padding_idx=PAD)
        self.positions = nn.Embedding(config.max_len, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.head = nn.Linear(D, config.num_classes + 1)

    def forward(self, source: Tensor, target_input: Tensor | None = None, *, need_weights=False):
        B, S = source.shape
        x = self.embed(source) + self.positions(torch.arange(S, device=source.device))
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (split_heads(t, self.config.num_heads) for t in (q, k, v))  # (B, H, S, Dh)
        keep = padding_mask(source, PAD)  # (B, 1, 1, S)
        attended = attention_with_weights(q, k, v, mask=keep)
        x = x + self.out(merge_heads(attended.output))  # (B, S, D)
        real = (source != PAD).unsqueeze(-1).float()
        pooled = (x * real).sum(1) / real.sum(1).clamp(min=1.0)  # (B, D)
        logits = self.head(pooled).unsqueeze(1)  # (B, 1, C + 1)
        weights = {"self": [attended.weights]} if need_weights else None
        return LMOutput(logits, weights)


register_model(TOY_MODEL, ToyConfig, ToyClassifier)
