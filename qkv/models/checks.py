"""Checks every model shares: token-id inputs and the fields of the model configs.

Each raises at once with a message that names the value and the fix (qkv's errors).

Token ids, everywhere in qkv's models: a 2-D (B, T) tensor of dtype ``torch.int64`` or
``torch.int32`` (the integer dtypes ``nn.Embedding`` reads), with T >= 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from qkv.errors import InputError

__all__ = [
    "TOKEN_ID_DTYPES",
    "TokenDtypeError",
    "check_config",
    "check_token_ids",
    "check_positive_ints",
    "check_heads",
    "check_dropout",
    "check_vocabularies",
]

#: The dtypes a token-id tensor may have: what ``nn.Embedding`` accepts.
TOKEN_ID_DTYPES = (torch.int64, torch.int32)


class TokenDtypeError(InputError, TypeError):
    """Token ids of a dtype the embeddings cannot read (also a TypeError, as Python has it)."""


def check_config(model: object, config: object, expected: type) -> None:
    """A model takes one config dataclass: refuse another kind, naming both classes."""
    if not isinstance(config, expected):
        raise TypeError(
            f"{type(model).__name__} needs a {expected.__name__}, got {type(config).__name__}"
        )


def check_token_ids(tokens: Tensor, name: str, *, unit: str = "sequence") -> None:
    """``tokens`` must be (B, T) ids of a dtype in :data:`TOKEN_ID_DTYPES`, T >= 1;
    ``unit`` names what a row is in the message ("sequence", "caption")."""
    if not isinstance(tokens, Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise InputError(f"{name} must be token ids of shape (B, T), got {shape}")
    if tokens.dtype not in TOKEN_ID_DTYPES:
        raise TokenDtypeError(
            f"{name} must hold integer token ids (torch.int64 or torch.int32), got "
            f"{tokens.dtype}; convert with .long()"
        )
    if tokens.shape[1] == 0:
        raise InputError(f"{name} is empty (length 0); every {unit} needs at least one token")


def check_positive_ints(config: Any, names: tuple[str, ...], *, allow_zero: bool = False) -> None:
    """Each field ``names`` of ``config`` must be an int (not a bool), > 0 (>= 0 with
    ``allow_zero``); None fields are skipped (optional sizes)."""
    for name in names:
        value = getattr(config, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1 - allow_zero:
            kind = "non-negative" if allow_zero else "positive"
            raise InputError(f"{name}={value!r} must be a {kind} integer")


def check_heads(config: Any) -> None:
    """``d_model`` must split into ``num_heads`` heads, and those into groups of
    ``num_kv_heads`` (grouped-query attention; fields d_model, num_heads, num_kv_heads)."""
    if config.d_model % config.num_heads:
        raise InputError(
            f"d_model={config.d_model} is not divisible by num_heads={config.num_heads}"
        )
    if config.num_heads % config.num_kv_heads:
        raise InputError(
            f"num_heads={config.num_heads} is not divisible by num_kv_heads={config.num_kv_heads}"
        )


def check_dropout(dropout: float, name: str = "dropout") -> None:
    if not 0.0 <= dropout < 1.0:
        raise InputError(f"{name}={dropout} must be in [0, 1)")


def check_vocabularies(config: Any) -> None:
    """A translator's ``share_embeddings`` needs one vocabulary, and ``pad_id`` must be an
    id of both (fields source_vocab_size, target_vocab_size, share_embeddings, pad_id)."""
    source, target = config.source_vocab_size, config.target_vocab_size
    if config.share_embeddings and source != target:
        raise InputError(
            f"share_embeddings=True needs one vocabulary, but source_vocab_size={source} != "
            f"target_vocab_size={target}; build a joint vocabulary or set share_embeddings=False"
        )
    if not 0 <= config.pad_id < min(source, target):
        raise InputError(
            f"pad_id={config.pad_id} must be a token id of both vocabularies "
            f"(sizes {source}, {target})"
        )
