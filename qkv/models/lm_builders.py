"""The architectures of the decoder-only LM: each a choice of components for one model.

    gpt(vocab_size, ...)       LayerNorm, GELU MLP, learned positions, biases, tied output
    llama(vocab_size, ...)     RMSNorm, SwiGLU, RoPE, no biases, untied output (Qwen2, Mistral)
    nanochat(vocab_size, ...)  parameter-free RMSNorm (embeddings too), ReLU^2 MLP, RoPE,
                               QK-norm, untied output, logits soft-capped at 15

Each builder returns a :class:`~qkv.models.lm.DecoderLM`; ``architecture_config(name,
vocab_size, **fields)`` the :class:`~qkv.models.lm_config.LMConfig` it is built from.  Any
field may be given to override the architecture's choice (``llama(..., window=4096)`` is
Mistral; ``gpt(..., positions="rope")`` a GPT with rotary positions).  A per-layer window
pattern comes from :func:`~qkv.models.lm_config.window_layers_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from qkv.errors import InputError

from .lm import DecoderLM
from .lm_config import LMConfig

__all__ = ["ARCHITECTURES", "architecture_config", "architecture_of", "gpt", "llama", "nanochat"]

#: name -> the LMConfig fields that make the architecture (the rest are sizes).
ARCHITECTURES: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "gpt": MappingProxyType(
            dict(
                norm="layer",
                norm_eps=1e-5,
                feed_forward="mlp",
                activation="gelu",
                positions="learned",
                bias=True,
                tie_embeddings=True,
                qk_norm=False,
                embedding_norm=False,
                logit_softcap=None,
            )
        ),
        "llama": MappingProxyType(
            dict(
                norm="rms",
                norm_eps=1e-6,
                feed_forward="gated",
                activation="silu",
                positions="rope",
                bias=False,
                tie_embeddings=False,
                qk_norm=False,
                embedding_norm=False,
                logit_softcap=None,
            )
        ),
        "nanochat": MappingProxyType(
            dict(
                norm="rms_free",
                norm_eps=1e-6,
                feed_forward="mlp",
                activation="relu2",
                positions="rope",
                bias=False,
                tie_embeddings=False,
                qk_norm=True,
                embedding_norm=True,
                logit_softcap=15.0,
            )
        ),
    }
)


def gated_width(d_model: int, multiple: int = 64) -> int:
    """SwiGLU's hidden width for a block as large as a 4x MLP: 8/3 d_model (three matrices
    instead of two), rounded up to a multiple of ``multiple`` (Llama's rule)."""
    return -(-(8 * d_model // 3) // multiple) * multiple


def architecture_config(name: str, vocab_size: int, **fields: Any) -> LMConfig:
    """The config of architecture ``name`` over ``vocab_size`` tokens, ``fields`` (sizes,
    or any component) overriding its choices.  Without ``d_ff`` the feed-forward is as
    large as GPT's 4 x d_model MLP: 4 x d_model, or :func:`gated_width` for a gated one."""
    if name not in ARCHITECTURES:
        raise InputError(f"architecture {name!r} is not one of {sorted(ARCHITECTURES)}")
    chosen = {**ARCHITECTURES[name], **fields}
    if "d_ff" not in fields:
        d_model = chosen.get("d_model", LMConfig.d_model)
        chosen["d_ff"] = gated_width(d_model) if chosen["feed_forward"] == "gated" else 4 * d_model
    return LMConfig(vocab_size, **chosen)


def architecture_of(config: LMConfig) -> str | None:
    """The name of the architecture whose every choice ``config`` keeps (None: a mix)."""
    for name, choices in ARCHITECTURES.items():
        if all(getattr(config, key) == value for key, value in choices.items()):
            return name
    return None


def gpt(vocab_size: int, **fields: Any) -> DecoderLM:
    """GPT-2's layout: pre-LayerNorm blocks, a GELU MLP, learned positions, biases, the
    output tied to the embeddings.  ``fields``: sizes and overrides (see LMConfig)."""
    return DecoderLM(architecture_config("gpt", vocab_size, **fields))


def llama(vocab_size: int, **fields: Any) -> DecoderLM:
    """Llama's layout (Qwen2 and Mistral too): pre-RMSNorm blocks, SwiGLU, RoPE, no biases,
    an untied output; grouped KV heads with ``num_kv_heads``, Mistral's window with
    ``window``."""
    return DecoderLM(architecture_config("llama", vocab_size, **fields))


def nanochat(vocab_size: int, **fields: Any) -> DecoderLM:
    """nanochat's layout: parameter-free RMSNorm (after the embeddings too), a ReLU^2 MLP,
    RoPE, QK-norm, no biases, an untied output and logits soft-capped at 15."""
    return DecoderLM(architecture_config("nanochat", vocab_size, **fields))
