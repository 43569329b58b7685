"""qkv.layers: nn.Modules that own parameters and call qkv.functional."""

from .attention import Attention, AttentionMemory
from .blocks import (
    DecoderBlock,
    DecoderBlockOutput,
    DecoderLayerState,
    EncoderBlock,
    EncoderBlockOutput,
)
from .cache import KVCache, StaticKV
from .cnn import RegionEncoder, ResidualBlock, SmallResNet
from .feature_attention import FeatureAttentionOutput, SelfAttention2d
from .feedforward import FeedForward
from .multihead import MultiHeadAttention
from .pooling import AttentionPooling, PoolingOutput
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
from .tagger import SequenceTagger, TaggerOutput

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
    "AttentionPooling",
    "PoolingOutput",
    "SelfAttention2d",
    "FeatureAttentionOutput",
    "SequenceTagger",
    "TaggerOutput",
]
