"""The argument checks every attention entry point shares: tensors, mask, causal alignment.

Each raises one clear error naming the problem and the fix, before any kernel runs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import InputError

__all__ = ["check_call", "check_tensors", "check_mask", "check_causal"]


def check_call(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool
) -> Tensor | None:
    """The tensors, the mask and the causal alignment of one call, in that order; returns the
    mask as :func:`check_mask` gives it."""
    check_tensors(query, key, value)
    mask = check_mask(mask, query, key)
    check_causal(causal, query.shape[2], key.shape[2])
    return mask


def check_tensors(query: Tensor, key: Tensor, value: Tensor) -> None:
    """query (B, H, Tq, Dh), key (B, Hkv, Tk, Dh), value (B, Hkv, Tk, Dv): tensors, floating,
    one dtype and device, matching sizes, Hkv dividing H, nothing empty."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise InputError(
                f"{name} must have shape (B, H, T, D), got {tuple(t.shape)}; "
                "use split_heads() to go from (B, T, D) to (B, H, T, Dh)"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key, value dtypes differ: {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise InputError(
            f"query, key, value are on different devices: {query.device}, {key.device}, {value.device}"
        )
    (b, h, tq, dh), (bk, hk, tk, dk), (bv, hv, tv, _) = query.shape, key.shape, value.shape
    if b == bk == bv and hk == hv and h % hk == 0 and tk == tv and dh == dk and tq and tk:
        return  # the common case, without formatting the messages below
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if not (b == bk == bv):
        raise InputError(f"batch sizes differ: {shapes}")
    if hk != hv or h % hk:
        raise InputError(
            f"key and value need the same number of heads, dividing the query's: {shapes}"
        )
    if tk != tv:
        raise InputError(f"key and value need the same length Tk: {shapes}")
    if dh != dk:
        raise InputError(f"query and key need the same width Dh (q and k must share d_k): {shapes}")
    if tq == 0 or tk == 0:
        raise InputError(
            f"empty sequence (Tq={tq}, Tk={tk}): attention needs at least one query and one key"
        )


def check_mask(mask: Tensor | None, query: Tensor, key: Tensor) -> Tensor | None:
    """A mask broadcastable to (B, H, Tq, Tk) on the query's device: boolean (True = may
    attend) as it is, a float bias in the query's dtype."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    target = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    if mask.dim() > 4 or any(m not in (1, t) for m, t in zip(mask.shape[::-1], target[::-1])):
        raise InputError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, Tq, Tk) = {target}; "
            "a padding mask is (B, 1, 1, Tk), a causal one (Tq, Tk)"
        )
    if mask.device != query.device:
        raise InputError(f"mask is on {mask.device} but query is on {query.device}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        return mask.to(query.dtype)  # an additive bias
    raise TypeError(
        f"mask must be bool (True = may attend) or a float additive bias, got {mask.dtype}; "
        "for 0/1 integers use mask.bool()"
    )


def check_causal(causal: bool, query_len: int, key_len: int) -> None:
    """End-aligned causal attention takes the queries to be the last positions of the keys,
    so it needs at least as many keys as queries."""
    if causal and key_len < query_len:
        raise InputError(
            f"causal attention needs Tk >= Tq (the queries are the last positions of the keys), "
            f"got Tq={query_len}, Tk={key_len}; pass the cached keys too, or causal=False"
        )
