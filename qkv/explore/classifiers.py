"""The explorer's data for the classifiers of ``qkv.models.classifier``: one picture or one
clip per input, the predicted (and, when known, the true) class, and the attention the model
returns with ``need_attention``:

- image-classifier: the feature-map self-attention over the grid x grid regions (query
  region x key region) and/or the attention pooling of the regions, with the picture;
- clip-classifier (attention pooling): the weight of each frame, with the frames;
- frame-tagger: every block's frame x frame self-attention per head, and its rollout.

The attention comes from :func:`qkv.explore.extract.classifier_attention`, which
``qkv classify --attention-out`` draws from too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from qkv.errors import InputError

from .extract import classifier_attention
from .summaries import attention_rollout, head_summary, quantize
from .views import attention_view, model_device, png_data_uri

__all__ = ["classifier_inputs"]


@torch.no_grad()
def classifier_inputs(
    model: nn.Module,
    kind: str,
    inputs: Sequence[Tensor],
    *,
    classes: Sequence[str],
    labels: Sequence[int | Sequence[int] | None] | None = None,
) -> list[dict[str, Any]]:
    """The ``inputs`` entries of the page for a classifier (docs/explorer.md's schema).

    inputs: pictures (C, S, S) for an image classifier, clips (T, C, S, S) otherwise, floats
        in [0, 1].  labels: per input the true class (a clip classifier, a picture) or the
        true class of each frame (a frame tagger), or None where unknown.
    """
    config = model.config
    if len(classes) != config.num_classes:
        raise InputError(f"{len(classes)} class names for a {config.num_classes}-class model")
    if labels is not None and len(labels) != len(inputs):
        raise InputError(f"{len(labels)} labels for {len(inputs)} inputs")
    pages = []
    for index, item in enumerate(inputs):
        _check_input(item, index, kind, config.channels)
        logits, attention = classifier_attention(model, item[None].to(model_device(model)))
        predicted = logits[0, :, 1:].argmax(dim=-1).tolist()  # class ids, <pad> left out
        names = [classes[c] for c in predicted]
        label = labels[index] if labels is not None else None
        page: dict[str, Any] = {
            "name": f"{'image' if kind == 'image-classifier' else 'clip'} {index + 1}",
            "output": " ".join(names),
            "output_tokens": names,
            "score": round(float(logits[0, :, 1:].log_softmax(-1).max(-1).values.sum()), 4),
            "prediction": predicted,
            "label": _true_label(label, kind, len(predicted)),
        }
        truth = page["label"]
        truth = None if truth is None else truth if isinstance(truth, list) else [truth]
        page["truth_tokens"] = None if truth is None else [classes[c] for c in truth]
        if kind == "image-classifier":
            grid = config.grid
            regions = [f"({r}, {c})" for r in range(grid) for c in range(grid)]
            page["image"] = {"png": _png(item), "grid": [grid, grid]}
            page["views"] = _image_views(attention, regions)
        else:
            frames = [f"{t}" for t in range(len(item))]
            if kind == "frame-tagger":
                frames = [f"{t} {name}" for t, name in enumerate(names)]
            page["frames"] = [_png(frame) for frame in item]
            page["views"] = _clip_views(attention, frames)
        page["source"] = page["name"]
        page["source_tokens"] = page["views"][0]["key_tokens"]
        pages.append(page)
    return pages


def _image_views(attention: dict[str, list[Tensor]], regions: list[str]) -> list[dict]:
    views = []
    if "feature" in attention:
        title = "feature-map self-attention: query region \u2192 key regions"
        views.append(_view("feature", title, regions, regions, attention["feature"]))
    if "regions" in attention:
        title = "attention pooling over the regions"
        views.append(_view("regions", title, ["pooled"], regions, attention["regions"]))
    return views


def _clip_views(attention: dict[str, list[Tensor]], frames: list[str]) -> list[dict]:
    if "frames" in attention:
        title = "attention pooling over the frames"
        return [_view("frames", title, ["clip"], frames, attention["frames"])]
    view = _view("self", "frame self-attention", frames, frames, attention["self"])
    rollouts = attention_rollout([layer[0] for layer in attention["self"]])
    for layer, rollout in zip(view["layers"], rollouts, strict=True):
        layer["rollout"] = quantize(rollout)
        layer["rollout_summary"] = head_summary(rollout, self_attention=True)
    return [view]


def _view(name: str, title: str, queries, keys, layers: list[Tensor]) -> dict[str, Any]:
    """``layers``: per layer (1, H, Tq, Tk) for one input; one query row is a pooling."""
    self_attention = queries is keys
    query_side = "source" if self_attention else "output"
    weights = [layer[0] for layer in layers]  # (H, Tq, Tk)
    view = attention_view(name, title, queries, keys, query_side, "source", weights)
    view["kind"] = "self" if self_attention else "pooling"
    return view


def _check_input(item, index: int, kind: str, channels: int) -> None:
    want = "(C, S, S) pictures" if kind == "image-classifier" else "(T, C, S, S) clips"
    dims = 3 if kind == "image-classifier" else 4
    if not isinstance(item, Tensor) or item.dim() != dims or item.shape[-3] != channels:
        raise InputError(
            f"input {index}: a {kind} takes {want} with C = {channels}, got "
            f"{type(item).__name__} {tuple(getattr(item, 'shape', ()))}"
        )
    if not item.is_floating_point() or float(item.min()) < 0 or float(item.max()) > 1:
        raise InputError(f"input {index}: pixels must be floats in [0, 1] (no padding frames)")


def _true_label(label, kind: str, count: int):
    if label is None:
        return None
    if kind == "frame-tagger":
        label = [int(c) for c in label]
        if len(label) != count:
            raise InputError(f"{len(label)} frame labels for a clip of {count} frames")
        return label
    return int(label)


def _png(picture: Tensor) -> str:
    return png_data_uri(picture.expand(3, -1, -1) if picture.shape[0] == 1 else picture)
