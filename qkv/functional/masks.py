"""Boolean attention masks.  Convention, everywhere in qkv: ``True`` = may attend.

This is the convention of ``torch.nn.functional.scaled_dot_product_attention``.
PyTorch's ``key_padding_mask`` (``nn.MultiheadAttention``, ``nn.Transformer``) uses the
opposite polarity (``True`` = ignore); :func:`from_key_padding_mask` is the one place
that converts.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["padding_mask", "causal_mask", "from_key_padding_mask"]


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens (not padding) may be attended.

    Shapes: tokens (B, Tk) -> mask (B, 1, 1, Tk), broadcastable to (B, H, Tq, Tk).
    """
    if tokens.dim() != 2:
        raise ValueError(
            f"padding_mask expects token ids of shape (B, T), got {tuple(tokens.shape)}"
        )
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(
    query_len: int, key_len: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Position i may attend to key j only if j <= i (lower-triangular).

    When ``key_len > query_len`` (decoding with a cache: the queries are the last
    ``query_len`` positions of a ``key_len``-long sequence) the diagonal is aligned to the
    end, so the last query sees every key.  Shapes: -> (Tq, Tk).
    """
    key_len = query_len if key_len is None else key_len
    if key_len < query_len:
        raise ValueError(
            f"causal_mask needs key_len >= query_len (queries are the last positions of the "
            f"keys), got query_len={query_len}, key_len={key_len}"
        )
    offset = key_len - query_len
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(key_len, device=device)[None, :]
    return cols <= rows + offset


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert PyTorch's ``key_padding_mask`` (B, Tk), ``True`` = *ignore*, to qkv's
    convention, ``True`` = *may attend*, shaped (B, 1, 1, Tk)."""
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(f"key_padding_mask must be bool, got {key_padding_mask.dtype}")
    return (~key_padding_mask)[:, None, None, :]
