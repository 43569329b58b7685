"""qkv: attention, from softmax(QK^T / sqrt(d)) V to trained models whose attention you can see."""

from . import functional, layers
from .functional import (
    attention,
    attention_with_weights,
    causal_mask,
    explain_backend,
    masked_softmax,
    merge_heads,
    padding_mask,
    split_heads,
)
from .layers import (
    AdditiveScore,
    ALiBi,
    Attention,
    BilinearScore,
    DecoderBlock,
    DotScore,
    EncoderBlock,
    KVCache,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RotaryEmbedding,
    ScaledDotScore,
    SinusoidalPositionalEncoding,
    StaticKV,
    available_positions,
    register_position,
    register_score,
)

__version__ = "0.1.0"

__all__ = [
    "functional",
    "attention_with_weights",
    "layers",
    "Attention",
    "MultiHeadAttention",
    "KVCache",
    "StaticKV",
    "DotScore",
    "ScaledDotScore",
    "BilinearScore",
    "AdditiveScore",
    "register_score",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "register_position",
    "available_positions",
    "EncoderBlock",
    "DecoderBlock",
    "attention",
    "explain_backend",
    "masked_softmax",
    "padding_mask",
    "causal_mask",
    "split_heads",
    "merge_heads",
]
