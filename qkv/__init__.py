"""qkv: attention, from softmax(QK^T / sqrt(d)) V to trained models whose attention you can see."""

from . import functional
from .functional import (
    attention,
    causal_mask,
    explain_backend,
    masked_softmax,
    merge_heads,
    padding_mask,
    split_heads,
)

__version__ = "0.1.0"

__all__ = [
    "functional",
    "attention",
    "explain_backend",
    "masked_softmax",
    "padding_mask",
    "causal_mask",
    "split_heads",
    "merge_heads",
]
