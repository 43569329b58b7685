"""Long inputs on the page: a self-attention view of more than ``DENSE_TOKENS`` tokens stores,
per layer, each head's queries and keys in half precision instead of its T x T weights, and
the page computes a head's weights when it is shown (``softmax(q k^T / sqrt(d))`` over the
keys the layer lets each query see: causal, and within the layer's sliding window where it
has one).  A 1,024-token input of a 12 x 12 model would otherwise hold 151 M weights.

The page's weights then differ from the model's by the rounding of q and k to float16; that
difference is measured here, for every head, and the page states it (``max_error``).  The
mean over heads and the rollout are computed in the page too, from the weights it computes
(the heads' mean in float64, then the rollout of those means); their differences from the
model's are measured here as well (``mean_error``, ``rollout_error``).  The model view draws
each head downsampled to ``THUMB`` x ``THUMB`` (the mean of each block, stored as bytes
against the head's maximum).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from qkv.errors import InputError
from qkv.functional import patterns
from qkv.functional.block_mask import create_mask

from .summaries import attention_rollout, head_summary

__all__ = ["DENSE_TOKENS", "THUMB", "compact_layers", "compact_view"]

#: Self-attention views up to this many tokens store their weights; longer ones q and k.
DENSE_TOKENS = 256
THUMB = 64


def compact_layers(
    layers: list[Tensor],
    vectors: dict[int, dict],
    *,
    causal: bool,
    windows: Sequence[int | None] | None = None,
) -> tuple[list[dict], dict[str, float]]:
    """The page's ``layers`` entries of a compact view, and the largest differences between
    what the page computes and the model's ``layers`` (per layer (H, T, T)): ``max_error``
    for a head's weights, ``mean_error`` for the mean over heads, ``rollout_error`` for the
    rollout.

    vectors: per layer the caught {"q": (H, T, Dh), "k": (Hkv, T, Dh)} and optionally the
    layer's "scale" (default 1/sqrt(Dh)), or {"absent": why}.
    windows: per layer its sliding window (query i sees keys i - window < j <= i) or None."""
    windows = list(windows) if windows is not None else [None] * len(layers)
    entries, errors = [], {"max_error": 0.0, "mean_error": 0.0}
    page_means = []  # per layer the mean the page computes, (T, T), for the rollout's error
    for index, weights in enumerate(layers):
        found = vectors[index]
        if "absent" in found:
            raise InputError(
                f"an input of {weights.shape[-1]} tokens is stored as q and k, and layer "
                f"{index} has none ({found['absent']}); explore at most {DENSE_TOKENS} tokens"
            )
        q, k = found["q"].half(), found["k"].half()
        scale = found.get("scale", 1.0 / q.shape[-1] ** 0.5)  # a layer's own, where it has one
        computed = _weights(q, k, scale, causal=causal, window=windows[index])
        _worst(errors, "max_error", computed, weights)
        page_means.append(computed.double().mean(0))
        _worst(errors, "mean_error", page_means[-1], weights.double().mean(0))
        heads, length, dim = q.shape
        entries.append(
            {
                "compact": {
                    "q": _base64(q),
                    "k": _base64(k),
                    "heads": heads,
                    "kv_heads": k.shape[0],
                    "dim": dim,
                    "length": length,
                    "scale": scale,
                    "causal": causal,
                    "window": windows[index],
                    "thumb": _base64(_thumbs(weights)),
                    "thumb_size": min(THUMB, length),
                },
                "summaries": [head_summary(head, self_attention=True) for head in weights],
                "mean_summary": head_summary(weights.mean(0), self_attention=True),
            }
        )
    rollouts = attention_rollout(layers)
    errors["rollout_error"] = 0.0
    for entry, model, page in zip(entries, rollouts, attention_rollout(page_means), strict=True):
        entry["rollout_summary"] = head_summary(model, self_attention=True)
        _worst(errors, "rollout_error", page, model)
    return entries, errors


def _worst(errors: dict[str, float], name: str, page: Tensor, model: Tensor) -> None:
    errors[name] = max(errors[name], float((page.double() - model.double()).abs().max()))


def _weights(
    q: Tensor, k: Tensor, scale: float, *, causal: bool, window: int | None = None
) -> Tensor:
    """What the page computes from the stored halves (the page in float64, here float32: a
    difference near 1e-7, far below the rounding).  (H, T, Dh) -> (H, T, T)."""
    q, k = q.float(), k.float().repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    scores = q @ k.transpose(-1, -2) * scale
    keep = kept_keys(q.shape[1], q.shape[1], causal=causal, window=window)
    return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)


def kept_keys(tq: int, tk: int, *, causal: bool, window: int | None = None) -> Tensor:
    """(tq, tk) boolean: the keys each query sees, by the kernel's own rules (causal, or a
    sliding window) evaluated on the index grid; the queries are the last tq positions."""
    if not causal and window is None:
        return torch.ones(tq, tk, dtype=torch.bool)
    rule = patterns.causal if window is None else patterns.sliding_window(window)
    offset = tk - tq

    def end_aligned(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return rule(b, h, q_idx + offset, kv_idx)

    return create_mask(end_aligned, None, None, tq, tk, "cpu")[0, 0]


def _thumbs(weights: Tensor) -> Tensor:
    """Each head's block means, as bytes against the head's maximum.  (H, T, T) -> (H, S, S)."""
    size = min(THUMB, weights.shape[-1])
    pooled = F.adaptive_avg_pool2d(weights[None].float(), size)[0]
    top = pooled.flatten(1).max(dim=1).values.clamp_min(1e-12)[:, None, None]
    return (pooled / top * 255).round().to(torch.uint8)


def _base64(t: Tensor) -> str:
    array = t.contiguous().cpu().numpy()
    if array.dtype == np.float16:
        array = array.astype("<f2")
    return base64.b64encode(array.tobytes()).decode("ascii")


def compact_view(
    name: str,
    title: str,
    tokens: list[str],
    layers,
    vectors,
    *,
    causal: bool,
    windows: Sequence[int | None] | None = None,
):
    """A self-attention view (docs/explorer.md's schema) whose layers are compact."""
    entries, errors = compact_layers(layers, vectors, causal=causal, windows=windows)
    return {
        "id": name,
        "title": title,
        "kind": "self",
        "query_side": "source",
        "key_side": "source",
        "query_tokens": list(tokens),
        "key_tokens": list(tokens),
        "layers": entries,
        "compact": True,
        **errors,
    }
