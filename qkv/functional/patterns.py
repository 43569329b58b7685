"""Ready-made attention patterns for :func:`~qkv.functional.flex.flex_attention`.

Mask functions ``mask_mod(b, h, i, j) -> bool`` (True = query i may attend key j) and score
functions ``score_mod(s, b, h, i, j) -> s'``, written elementwise as PyTorch's FlexAttention
expects.  Combine masks with :func:`~qkv.functional.block_mask.and_masks` /
:func:`~qkv.functional.block_mask.or_masks`, e.g. causal packed documents:
``and_masks(causal, document(ids))``.  Positions are the raw indices 0..Tq-1, 0..Tk-1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import InputError

__all__ = [
    "causal",
    "sliding_window",
    "document",
    "prefix_lm",
    "global_tokens",
    "dilated",
    "alibi",
    "softcap",
    "relative_bias",
    "chain_scores",
]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """j <= i: a query sees itself and the past."""
    return q_idx >= kv_idx


def sliding_window(window: int) -> MaskMod:
    """0 <= i - j < w: the w most recent keys, itself included (Mistral's causal window)."""
    _check_positive("window", window)

    def sliding_window_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance < window)

    return sliding_window_mask


def document(ids: Tensor) -> MaskMod:
    """doc(i) = doc(j): a query sees only its own document of a packed sequence.

    ``ids``: (T,) or (B, T) integer document ids of the positions (queries and keys share
    them: self-attention over one packed sequence).
    """
    if not isinstance(ids, Tensor) or ids.dim() not in (1, 2) or ids.is_floating_point():
        raise InputError("document ids must be an integer tensor of shape (T,) or (B, T)")

    if ids.dim() == 1:

        def document_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return ids[q_idx] == ids[kv_idx]

    else:

        def document_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return ids[b, q_idx] == ids[b, kv_idx]

    return document_mask


def prefix_lm(prefix: int) -> MaskMod:
    """j < n or j <= i: the first n positions (the prefix) are seen by every query, in
    both directions; the rest is causal (the prefix LM of T5 / UniLM)."""
    _check_positive("prefix", prefix)

    def prefix_lm_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx < prefix) | (q_idx >= kv_idx)

    return prefix_lm_mask


def global_tokens(count: int, window: int | None = None) -> MaskMod:
    """i < n or j < n: the first n tokens attend to and are attended by all; with a
    ``window`` w also |i - j| <= w (Longformer's local window plus global tokens)."""
    _check_positive("count", count)
    if window is not None:
        _check_positive("window", window)

    def global_tokens_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        keep = (q_idx < count) | (kv_idx < count)
        if window is not None:
            keep = keep | ((q_idx - kv_idx).abs() <= window)
        return keep

    return global_tokens_mask


def dilated(window: int, dilation: int) -> MaskMod:
    """0 <= i - j < w d and d | (i - j): w causal keys, one every d positions (the
    dilated sliding window of Longformer)."""
    _check_positive("window", window)
    _check_positive("dilation", dilation)

    def dilated_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance < window * dilation) & (distance % dilation == 0)

    return dilated_mask


def alibi(slopes: Tensor, query_start: int = 0) -> ScoreMod:
    """s - m_h |p_i - j| with p_i = query_start + i: ALiBi's per-head linear distance
    penalty (Press et al. 2022), as :func:`~qkv.functional.positions.alibi_bias`.

    ``slopes``: (H,), e.g. :func:`~qkv.functional.positions.alibi_slopes`.
    """
    if not isinstance(slopes, Tensor) or slopes.dim() != 1:
        raise InputError("alibi slopes must be a (H,) tensor (see alibi_slopes(num_heads))")

    def alibi_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        distance = (q_idx + query_start - kv_idx).abs()
        return score - slopes[h].to(score.dtype) * distance.to(score.dtype)

    return alibi_score


def softcap(cap: float) -> ScoreMod:
    """c tanh(s / c): scores squashed smoothly into (-c, c) (Gemma 2's logit soft-capping)."""
    # NaN or inf would make every score NaN (inf * tanh(s / inf) = inf * 0)
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or not 0 < cap < math.inf:
        raise InputError(f"softcap cap={cap!r} must be a positive finite number, e.g. 50.0")

    def softcap_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return torch.tanh(score / cap) * cap

    return softcap_score


def relative_bias(table: Tensor) -> ScoreMod:
    """s + t_h[clip(j - i, -R, R) + R]: a (learned) bias per head and clipped relative
    distance (Shaw et al. 2018 as a scalar bias; T5 without buckets).

    ``table``: (H, 2R + 1); if it requires grad, flex_attention gives it its gradient.
    """
    if not isinstance(table, Tensor) or table.dim() != 2 or table.shape[1] % 2 != 1:
        raise InputError("relative_bias table must be (H, 2R + 1): one bias per head and distance")
    radius = table.shape[1] // 2

    def relative_bias_score(
        score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
    ) -> Tensor:
        offset = (kv_idx - q_idx).clamp(-radius, radius) + radius
        return score + table[h, offset]

    return relative_bias_score


def chain_scores(*score_mods: ScoreMod | None) -> ScoreMod | None:
    """s -> f_n(... f_1(s)): the score functions applied in turn (None ones skipped)."""
    mods = [mod for mod in score_mods if mod is not None]
    if len(mods) <= 1:
        return mods[0] if mods else None

    def chained_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        for mod in mods:
            score = mod(score, b, h, q_idx, kv_idx)
        return score

    return chained_score


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name}={value!r} must be a positive int")
