"""Attention pictures of a translator's output, by layer and head or averaged."""

from __future__ import annotations

from pathlib import Path

from ..explore.arrays import chosen_weights
from ..plotting import plot_alignment, plot_alignment_grid
from .translator import Translation, Translator

__all__ = ["plot_translation_attention"]


def plot_translation_attention(
    translator: Translator,
    translation: Translation,
    path: str | Path,
    *,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
) -> Path:
    """Write the cross-attention heatmap (generated tokens x source tokens) of a translation.

    layer: which decoder layer (default: the last); head: which head (default: the average
    over heads); all_heads: one panel per head of the layer instead."""
    layers = translator.cross_attention(translation)  # per layer (H, T, S)
    layer, weights = chosen_weights(layers, layer, head, "decoder layer(s)")
    heads = weights.shape[0]
    target = [*translation.tokens, "</s>"][: weights.shape[1]]
    source = translation.source_tokens
    weights = weights[:, : len(target), : len(source)]
    if all_heads:
        titles = [f"layer {layer}, head {h}" for h in range(heads)]
        return plot_alignment_grid(weights, source, target, path, titles=titles)
    if head is None:
        title = f"cross-attention, layer {layer}, mean of {heads} head(s)"
        chosen = weights.mean(0)
    else:
        title = f"cross-attention, layer {layer}, head {head}"
        chosen = weights[head]
    return plot_alignment(chosen, source, target, path, title=title)
