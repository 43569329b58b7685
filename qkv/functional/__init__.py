"""qkv.functional: the math of attention as parameter-free functions on tensors.

Depends on torch alone.  Names follow SPEC.md: scores -> masked softmax -> weighted sum.
"""

from . import backends, positions
from .attention import attention, attention_with_weights, explain_backend
from .backends import AttentionOutput, BackendChoice, available_backends, register_backend
from .backends import chunked as _chunked  # noqa: F401  (registers "chunked")
from .backends import explicit_backend as _explicit  # noqa: F401  (registers "explicit")
from .backends import reference as _reference  # noqa: F401  (registers "reference")
from .backends import sdpa as _sdpa  # noqa: F401  (registers "sdpa")
from .backends.chunked import chunked_attention, weights_from_lse
from .backends.reference import attention_weights
from .block_mask import BlockMask, and_masks, create_block_mask, create_mask, noop_mask, or_masks
from .flex import AuxOutput, AuxRequest, flex_attention
from .heads import merge_heads, repeat_kv, split_heads
from .masks import causal_mask, from_key_padding_mask, padding_mask
from .positions import *  # noqa: F403  (re-exported whole: its __all__)
from .softmax import masked_softmax

__all__ = [
    "attention",
    "attention_weights",
    "attention_with_weights",
    "chunked_attention",
    "flex_attention",
    "create_block_mask",
    "create_mask",
    "BlockMask",
    "AuxRequest",
    "AuxOutput",
    "and_masks",
    "or_masks",
    "noop_mask",
    "weights_from_lse",
    "explain_backend",
    "AttentionOutput",
    "BackendChoice",
    "available_backends",
    "register_backend",
    "backends",
    "masked_softmax",
    "padding_mask",
    "causal_mask",
    "from_key_padding_mask",
    "split_heads",
    "merge_heads",
    "repeat_kv",
    *positions.__all__,
]
