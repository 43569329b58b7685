"""Attention pooling: the many-to-one head (a clip, a sentence or an image's regions -> one
vector), as a learned query attending over the items (SPEC section 1 with a fixed query)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional import attention

__all__ = ["AttentionPooling", "PoolingOutput"]


@dataclass
class PoolingOutput:
    """pooled: (B, Q, Dv) one vector per learned query.  weights: (B, Q, T) each query's
    weights over the items (rows sum to 1 over the items that may be attended)."""

    pooled: Tensor
    weights: Tensor


class AttentionPooling(nn.Module):
    r"""Q learned queries q_1..q_Q attend over the items x_1..x_T of each sequence:

        k_j = W_K x_j                       (key_dim wide)
        e_ij = q_i . k_j / sqrt(key_dim)    (scaled dot score)
        alpha_ij = softmax_j(e_ij)          over the items with mask True only
        z_i = sum_j alpha_ij v_j,  v_j = x_j (or W_V x_j when ``value_dim`` is given)

    $$\alpha_{ij} = \mathrm{softmax}_j\!\left(\frac{q_i \cdot W_K x_j}{\sqrt{d_k}}\right),\qquad
    z_i = \sum_j \alpha_{ij} v_j$$

    With ``value_dim=None`` each z_i is a weighted mean of the items themselves, so one
    query generalises mean pooling (equal weights) and max-like pooling (one-hot weights).
    A sequence whose every item is masked pools to zeros (weights all 0), never NaN.

    Shapes: x (B, T, D), mask (B, T) bool, True = a real item that may be attended
    -> PoolingOutput(pooled (B, Q, Dv), weights (B, Q, T)), Dv = value_dim or D.
    """

    def __init__(
        self,
        input_dim: int,
        *,
        num_queries: int = 1,
        key_dim: int | None = None,
        value_dim: int | None = None,
    ):
        super().__init__()
        key_dim = input_dim if key_dim is None else key_dim
        for name, value in (("input_dim", input_dim), ("num_queries", num_queries)):
            if value < 1:
                raise InputError(f"{name}={value} must be a positive integer")
        if key_dim < 1 or (value_dim is not None and value_dim < 1):
            raise InputError(f"key_dim={key_dim} and value_dim={value_dim} must be positive")
        self.input_dim = input_dim
        self.query = nn.Parameter(torch.randn(num_queries, key_dim) / math.sqrt(key_dim))
        self.key = nn.Linear(input_dim, key_dim, bias=False)
        self.value: nn.Module = (
            nn.Identity() if value_dim is None else nn.Linear(input_dim, value_dim)
        )

    def forward(self, x: Tensor, *, mask: Tensor | None = None) -> PoolingOutput:
        """Pool each sequence with the learned queries.  Shapes: x (B, T, D), mask (B, T) bool or
        None -> PoolingOutput(pooled (B, Q, Dv), weights (B, Q, T))."""
        if x.dim() != 3 or x.shape[-1] != self.input_dim:
            raise InputError(
                f"x must be (B, T, D={self.input_dim}), got {tuple(x.shape)}; pool a batch of "
                "sequences of item vectors"
            )
        batch, length, _ = x.shape
        keep = None
        if mask is not None:
            if mask.dtype != torch.bool or tuple(mask.shape) != (batch, length):
                raise InputError(
                    f"mask must be a bool (B, T) = {(batch, length)} tensor, True = real item; "
                    f"got {mask.dtype} {tuple(mask.shape)}"
                )
            keep = mask[:, None, None, :]  # (B, 1, 1, T)
        query = self.query.to(x.dtype).expand(batch, 1, -1, -1)  # (B, 1, Q, Dk)
        key = self.key(x).unsqueeze(1)  # (B, 1, T, Dk)
        value = self.value(x).unsqueeze(1)  # (B, 1, T, Dv)
        pooled, weights = attention(query, key, value, mask=keep, need_weights=True)
        return PoolingOutput(pooled.squeeze(1), weights.squeeze(1))  # (B, Q, Dv), (B, Q, T)
