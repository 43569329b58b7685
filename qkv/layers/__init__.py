"""qkv.layers: nn.Modules that own parameters and call qkv.functional."""

from .attention import Attention, AttentionMemory
from .blocks import (
    DecoderBlock,
    DecoderBlockOutput,
    DecoderLayerState,
    EncoderBlock,
    EncoderBlockOutput,
)
from .cache import AttentionCache, KVCache, StaticKV
from .cnn import RegionEncoder, ResidualBlock, SmallResNet
from .feedforward import FeedForward
from .multihead import MultiHeadAttention
from .positions import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from .recurrent import BidirectionalEncoder, EncoderStates
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
    "AttentionCache",
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
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "FeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "EncoderBlockOutput",
    "DecoderBlockOutput",
    "DecoderLayerState",
    "BidirectionalEncoder",
    "EncoderStates",
    "SmallResNet",
    "RegionEncoder",
    "ResidualBlock",
]
