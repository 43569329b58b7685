"""Where the captioner's context z_t comes from, and how much of it passes: components the
captioner is built from, chosen once from its config (never an ``if`` in the recurrence).

* :class:`AttendedRegions` (Xu et al. 2015): z_t = sum_p alpha_tp a_p with
  alpha_t = softmax_p score(h_{t-1}, a_p), soft attention over the image regions.
* :class:`MeanRegion`, the baseline: z_t = mean_p a_p at every step, no attention.
* :class:`ContextGate`: the paper's beta_t = sigmoid(w_beta . h_{t-1} + b) scaling z_t;
  :class:`NoGate`: beta_t = 1.

A context source has ``memory(regions)`` (what to prepare once per image, or None) and
``read(previous, memory, mean_region) -> (z_t (B, D), alpha_t (B, P) or None)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from qkv.layers.attention import Attention, AttentionMemory

__all__ = ["AttendedRegions", "MeanRegion", "ContextGate", "NoGate"]


class AttendedRegions(Attention):
    """Soft attention of h_{t-1} over the regions (the layer's parameters, unchanged).

    Shapes: previous (B, H), regions prepared by ``memory`` (B, P, D) -> z_t (B, D),
    alpha_t (B, P)."""

    def read(
        self, previous: Tensor, memory: AttentionMemory, mean_region: Tensor
    ) -> tuple[Tensor, Tensor]:
        context, weights = self.attend(previous[:, None, :], memory)  # (B, 1, D), (B, 1, P)
        return context[:, 0], weights[:, 0]


class MeanRegion(nn.Module):
    """No attention: the mean region feature, the same context at every step.

    Shapes: mean_region (B, D) -> z_t (B, D), None."""

    def memory(self, regions: Tensor) -> None:
        return None

    def read(self, previous: Tensor, memory: None, mean_region: Tensor) -> tuple[Tensor, None]:
        return mean_region, None


class ContextGate(nn.Linear):
    """beta_t = sigmoid(w_beta . h_{t-1} + b).  Shapes: previous (B, H) -> (B,)."""

    def __init__(self, hidden_dim: int):
        super().__init__(hidden_dim, 1)

    def forward(self, previous: Tensor) -> Tensor:
        return torch.sigmoid(super().forward(previous)).squeeze(-1)


class NoGate(nn.Module):
    """beta_t = 1: the context passes whole.  Shapes: previous (B, H) -> (B,)."""

    def forward(self, previous: Tensor) -> Tensor:
        return previous.new_ones(previous.shape[0])
