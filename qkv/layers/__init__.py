"""qkv.layers: nn.Modules that own parameters and call qkv.functional."""

from .attention import Attention, AttentionMemory
from .cache import KVCache, StaticKV
from .multihead import MultiHeadAttention
from .scores import (
    AdditiveScore,
    BilinearScore,
    DotScore,
    ScaledDotScore,
    Score,
    available_scores,
    make_score,
    register_score,
)

__all__ = [
    "Attention",
    "AttentionMemory",
    "KVCache",
    "StaticKV",
    "MultiHeadAttention",
    "Score",
    "DotScore",
    "ScaledDotScore",
    "BilinearScore",
    "AdditiveScore",
    "register_score",
    "make_score",
    "available_scores",
]
