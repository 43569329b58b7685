"""Attention for people who analyse rather than look: every layer's and head's weights as
arrays in one ``.npz`` (``qkv attention --weights-out``), and one layer's heads as a heatmap
(``qkv attention --out``), from the same weights the explorer page shows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from torch import Tensor, nn

from qkv.errors import InputError, NotFiniteError
from qkv.plotting import plot_alignment, plot_alignment_grid

from .registry import explorer_for
from .views import token_labels

__all__ = [
    "text_attention",
    "input_attention",
    "write_weights",
    "plot_attention",
    "chosen_weights",
]


def text_attention(model: nn.Module, tokenizer, text: str) -> tuple[str, list[str], list[Tensor]]:
    """The self-attention of a model that reads one sequence (a language model, a BERT
    encoder) on ``text``: the view's name, the tokens and per layer (H, T, T) float32
    weights (the model's, with ``need_weights``)."""
    model_type, adapter = explorer_for(model)
    read = getattr(adapter, "text_attention", None)
    if read is None:
        raise InputError(f"a {model_type!r} model does not read one text; give it its inputs")
    model.eval()
    ids, layers = read(model, tokenizer, text)
    if not all(bool(weights.isfinite().all()) for weights in layers):  # no heatmap of NaN
        raise NotFiniteError(
            "the model's attention weights on this text hold NaN or inf: its weights are not "
            "finite numbers (a diverged run, a corrupt file)"
        )
    return adapter.views[0], token_labels(tokenizer, ids), layers


def input_attention(model: nn.Module, tokenizer, item, *, target: str | None = None) -> dict:
    """Every attention of a model that reads one input (a text, or an image file for a
    vision folder; an encoder-decoder folder's decoder reads ``target`` or its greedy
    output): {"attention": {view: per layer (H, Tq, Tk)}, "tokens": {name: labels} (as
    :func:`write_weights` takes them), "plot": (the view to plot, its query and key
    tokens)}."""
    model_type, adapter = explorer_for(model)
    every = getattr(adapter, "input_attention", None)
    if every is not None:
        found = every(model, tokenizer, item, target)
    else:
        if target is not None:
            raise InputError(f"a target text is for encoder-decoder models, not {model_type!r}")
        view, tokens, layers = text_attention(model, tokenizer, item)
        found = {
            "attention": {view: layers},
            "tokens": {"tokens": tokens},
            "plot": (view, tokens, tokens),
        }
    for layers in found["attention"].values():
        if not all(bool(weights.isfinite().all()) for weights in layers):
            raise NotFiniteError(
                "the model's attention weights on this input hold NaN or inf: its weights are "
                "not finite numbers (a diverged run, a corrupt file)"
            )
    return found


def write_weights(
    path: str | Path, attention: Mapping[str, Sequence[Tensor]], **tokens: Sequence[str]
) -> Path:
    """One array per layer of each attention, named ``{view}.layer{i}``, shape (H, Tq, Tk)
    float32, and each token list as an array of str (``tokens=...``, ``source_tokens=...``)."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    for name, layers in attention.items():
        for index, weights in enumerate(layers):
            arrays[f"{name}.layer{index}"] = weights.detach().float().cpu().numpy()
    for name, labels in tokens.items():
        arrays[name] = np.array(list(labels), dtype=str)
    with path.open("wb") as handle:  # np.savez would append .npz to a name without it
        np.savez(handle, **arrays)
    return path


def chosen_weights(
    layers: Sequence[Tensor], layer: int | None, head: int | None, kind: str = "layer(s)"
) -> tuple[int, Tensor]:
    """The layer asked for (default: the last) and its (H, Tq, Tk) weights, after checking
    that it and ``head`` (None: every head) exist; ``kind`` names the layers in the error."""
    layer = len(layers) - 1 if layer is None else layer
    if not -len(layers) <= layer < len(layers):
        raise InputError(
            f"layer={layer} does not exist: the model has {len(layers)} {kind} "
            f"(0..{len(layers) - 1})",
            fields=("layer",),
        )
    weights = layers[layer]
    heads = weights.shape[0]
    if head is not None and not -heads <= head < heads:
        raise InputError(
            f"head={head} does not exist: layer {layer} has {heads} head(s) (0..{heads - 1})",
            fields=("head",),
        )
    return layer, weights


def plot_attention(
    layers: Sequence[Tensor],
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    path: str | Path,
    *,
    name: str,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
) -> Path:
    """One layer's attention as a heatmap: one head, the mean over heads (default), or every
    head side by side.  ``layers``: per layer (H, Tq, Tk); layer defaults to the last."""
    layer, weights = chosen_weights(layers, layer, head)
    heads = weights.shape[0]
    if all_heads:
        titles = [f"{name}, layer {layer}, head {h}" for h in range(heads)]
        return plot_alignment_grid(weights, key_tokens, query_tokens, path, titles=titles)
    if head is None:
        title, chosen = f"{name}, layer {layer}, mean of {heads} head(s)", weights.mean(0)
    else:
        title, chosen = f"{name}, layer {layer}, head {head}", weights[head]
    return plot_alignment(chosen, key_tokens, query_tokens, path, title=title)
