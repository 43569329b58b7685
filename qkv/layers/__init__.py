"""qkv.layers: nn.Modules that own parameters and call qkv.functional."""

from . import position_registry, positions, scores
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
from .gated_feedforward import GatedFeedForward
from .lm_block import LMBlock
from .multihead import MultiHeadAttention
from .pooling import AttentionPooling, PoolingOutput
from .position_registry import *  # noqa: F403  (re-exported whole: its __all__)
from .positions import *  # noqa: F403  (re-exported whole: its __all__)
from .recurrent import BidirectionalEncoder, EncoderStates
from .scores import *  # noqa: F403  (re-exported whole: its __all__)
from .tagger import SequenceTagger, TaggerOutput

__all__ = [
    "Attention",
    "AttentionMemory",
    "AttentionCache",
    "KVCache",
    "RollingKVCache",
    "StaticKV",
    "MultiHeadAttention",
    # every name of the scores, the position components and their registry
    *scores.__all__,
    *positions.__all__,
    *position_registry.__all__,
    "FeedForward",
    "EncoderBlock",
    "DecoderBlock",
    "EncoderBlockOutput",
    "LMBlock",
    "GatedFeedForward",
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
