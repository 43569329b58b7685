"""Splitting the model width into heads and back (SPEC section 5)."""

from __future__ import annotations

from torch import Tensor

__all__ = ["split_heads", "merge_heads", "repeat_kv"]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(B, T, D) -> (B, H, T, Dh) with D = H * Dh."""
    if x.dim() != 3:
        raise ValueError(f"split_heads expects (B, T, D), got shape {tuple(x.shape)}")
    batch, length, width = x.shape
    if width % num_heads:
        raise ValueError(f"width D={width} is not divisible by num_heads={num_heads}")
    return x.view(batch, length, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, Dh) -> (B, T, H * Dh): the heads' outputs concatenated."""
    if x.dim() != 4:
        raise ValueError(f"merge_heads expects (B, H, T, Dh), got shape {tuple(x.shape)}")
    batch, heads, length, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * head_dim)


def repeat_kv(x: Tensor, repeats: int) -> Tensor:
    """Grouped-query attention: share each key/value head among ``repeats`` query heads.

    (B, Hkv, T, Dh) -> (B, Hkv * repeats, T, Dh); query head h uses kv head h // repeats.
    """
    if repeats == 1:
        return x
    batch, kv_heads, length, head_dim = x.shape
    x = x[:, :, None].expand(batch, kv_heads, repeats, length, head_dim)
    return x.reshape(batch, kv_heads * repeats, length, head_dim)
