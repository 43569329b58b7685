"""qkv.layers: nn.Modules that own parameters and call qkv.functional."""

from .attention import Attention, AttentionMemory
from .blocks import (
    DecoderBlock,
    DecoderBlockOutput,
    DecoderLayerState,
    EncoderBlock,
    EncoderBlockOutput,
)
from .cache import AttentionCache, KVCache, RollingKVCache, StaticKV
from .cnn import RegionEncoder, ResidualBlock, SmallResNet
from .feature_attention import FeatureAttentionOutput, SelfAttention2d
from .feedforward import FeedForward
from .multihead import MultiHeadAttention
from .pooling import AttentionPooling, PoolingOutput
from .position_registry import (
    available_positions,
    build_attention_positions,
    build_input_positions,
    build_position,
    position_kind,
    register_position,
)
from .positions import (
    ConcatenatedPositionalEmbedding,
    LearnedPositionalEmbedding,
    NoInputPositions,
    SinusoidalPositionalEncoding,
)
from .recurrent import BidirectionalEncoder, EncoderStates
from .relative_positions import ALiBi, RotaryEmbedding
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
    "AttentionCache",
    "KVCache",
    "RollingKVCache",
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
    "ConcatenatedPositionalEmbedding",
    "NoInputPositions",
    "RotaryEmbedding",
    "ALiBi",
    "register_position",
    "available_positions",
    "position_kind",
    "build_position",
    "build_input_positions",
    "build_attention_positions",
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
