"""Self-attention over the positions of a CNN feature map, added back through a gate that
starts closed (Zhang et al. 2019, "Self-Attention Generative Adversarial Networks")."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional import attention

__all__ = ["SelfAttention2d", "FeatureAttentionOutput"]


@dataclass
class FeatureAttentionOutput:
    """output: (B, C, H, W).  weights: (B, HW, HW) when asked for (row p = where position
    p = row * W + column looked), else None."""

    output: Tensor
    weights: Tensor | None = None


class SelfAttention2d(nn.Module):
    r"""Every position of a feature map attends to every position of the same map:

        q_p = W_Q x_p,  k_p = W_K x_p   (1x1 convolutions to ``key_channels``, e.g. C / 8)
        v_p = W_V x_p                   (1x1 convolution, C channels)
        alpha_pj = softmax_j(q_p . k_j / sqrt(key_channels))   over the H * W positions
        y_p = x_p + gamma * sum_j alpha_pj v_j

    $$\alpha_{pj} = \mathrm{softmax}_j\!\left(\frac{q_p \cdot k_j}{\sqrt{d_k}}\right),\qquad
    y_p = x_p + \gamma \sum_j \alpha_{pj} v_j$$

    ``gamma`` is a learned scalar initialised at 0, so the layer starts as the identity and
    a pretrained CNN it is inserted into starts unchanged; training opens the gate as far as
    the attention helps.  (SAGAN's score is the unscaled dot product; the Transformer's
    scale is used here so the softmax does not saturate as the width grows.)

    Shapes: x (B, C, H, W); mask (B, H, W) bool, True = the position may be attended
    -> FeatureAttentionOutput(output (B, C, H, W), weights (B, HW, HW) or None).
    """

    def __init__(self, channels: int, *, key_channels: int | None = None):
        super().__init__()
        key_channels = max(channels // 8, 1) if key_channels is None else key_channels
        if channels < 1 or key_channels < 1:
            raise InputError(
                f"channels={channels} and key_channels={key_channels} must be positive"
            )
        self.channels = channels
        self.query = nn.Conv2d(channels, key_channels, kernel_size=1)
        self.key = nn.Conv2d(channels, key_channels, kernel_size=1)
        self.value = nn.Conv2d(channels, channels, kernel_size=1)
        self.gamma = nn.Parameter(torch.zeros(()))

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> FeatureAttentionOutput:
        r"""$y_p = x_p + \gamma \sum_j \alpha_{pj} v_j$.  Shapes: x (B, C, H, W), mask (B, H, W) bool
        or None -> FeatureAttentionOutput(output (B, C, H, W), weights when asked for)."""
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise InputError(
                f"x must be a feature map (B, C={self.channels}, H, W), got {tuple(x.shape)}"
            )
        batch, channels, height, width = x.shape
        keep = None
        if mask is not None:
            if mask.dtype != torch.bool or tuple(mask.shape) != (batch, height, width):
                raise InputError(
                    f"mask must be a bool (B, H, W) = {(batch, height, width)} tensor, True = "
                    f"may be attended; got {mask.dtype} {tuple(mask.shape)}"
                )
            keep = mask.flatten(1)[:, None, None, :]  # (B, 1, 1, HW)
        query = self.query(x).flatten(2).transpose(1, 2).unsqueeze(1)  # (B, 1, HW, Dk)
        key = self.key(x).flatten(2).transpose(1, 2).unsqueeze(1)  # (B, 1, HW, Dk)
        value = self.value(x).flatten(2).transpose(1, 2).unsqueeze(1)  # (B, 1, HW, C)
        attended, weights = attention(query, key, value, mask=keep, need_weights=need_weights)
        attended = attended.squeeze(1).transpose(1, 2).reshape(batch, channels, height, width)
        output = x + self.gamma.to(x.dtype) * attended
        return FeatureAttentionOutput(output, None if weights is None else weights.squeeze(1))
