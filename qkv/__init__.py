"""qkv: attention, from softmax(QK^T / sqrt(d)) V to trained models whose attention you can see."""

from . import functional, layers
from ._version import __version__ as __version__
from .functional import (
    AuxOutput,
    AuxRequest,
    BlockMask,
    and_masks,
    attention,
    attention_with_weights,
    causal_mask,
    create_block_mask,
    create_mask,
    explain_backend,
    flex_attention,
    masked_softmax,
    merge_heads,
    noop_mask,
    or_masks,
    padding_mask,
    split_heads,
)
from .layers import (
    AdditiveScore,
    ALiBi,
    Attention,
    BilinearScore,
    ConcatenatedPositionalEmbedding,
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


def __getattr__(name: str):
    # qkv.explore (the attention explorer page) reads models, decoding and images: imported
    # on first use, so that `import qkv` stays torch-only.
    if name == "explore":
        import importlib

        return importlib.import_module(".explore", __name__)
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")


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
    "ConcatenatedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "register_position",
    "available_positions",
    "EncoderBlock",
    "DecoderBlock",
    "attention",
    "flex_attention",
    "create_block_mask",
    "create_mask",
    "BlockMask",
    "AuxRequest",
    "AuxOutput",
    "and_masks",
    "or_masks",
    "noop_mask",
    "explain_backend",
    "masked_softmax",
    "padding_mask",
    "causal_mask",
    "split_heads",
    "merge_heads",
]
