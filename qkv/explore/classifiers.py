"""Explorer adapters for the classifiers of ``qkv.models.classifier``: one picture or one
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

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from qkv.errors import InputError

from .extract import classifier_attention
from .registry import ExplorerAdapter, ExploreRequest, PageKind, register_explorer
from .summaries import attention_rollout, head_summary, quantize
from .views import attention_view, model_device, png_data_uri

__all__ = [
    "ImageClassifierAdapter",
    "ClipClassifierAdapter",
    "FrameTaggerAdapter",
    "IMAGE_CLASSIFIER_PAGE",
    "CLIP_CLASSIFIER_PAGE",
    "FRAME_TAGGER_PAGE",
]


def _image_classifier_info(m: Mapping[str, Any]) -> str:
    pooled = ", attention pooling" if m.get("pool") == "attention" else ""
    features = ", feature-map self-attention" if m.get("feature_attention") else ""
    return f"image classifier: {m['grid']}\u00d7{m['grid']} regions{features}{pooled}"


#: A picture classifier's page: its views side by side over the regions, then the class.
IMAGE_CLASSIFIER_PAGE = PageKind(
    info=_image_classifier_info,
    multi_head=False,
    source_row="regions",
    target_row="output",
    classifier=True,
    term="query",
    grid_title="every view",
)
#: A clip classifier's page: the pooling's weight per frame, then the class.
CLIP_CLASSIFIER_PAGE = PageKind(
    info=lambda m: "clip classifier: attention pooling over the frames",
    multi_head=False,
    source_row="frames",
    target_row="output",
    classifier=True,
    term="query",
    grid_title="every view",
)
#: A frame tagger's page: every layer and head over the frames, then a class per frame.
FRAME_TAGGER_PAGE = PageKind(
    info=lambda m: f"frame tagger: {m['layers']} layers, {m['heads']} heads over the frames",
    multi_head=True,
    source_row="frames",
    target_row="output",
    classifier=True,
    term="query",
)


class ClassifierAdapter(ExplorerAdapter):
    """What the three classifiers share: class names (``classes``), true labels, the
    prediction.  A family says what one input is (``item_name``, ``dims``), how its labels
    read (``true_label``) and what its views hold (``input_views``)."""

    takes_labels = True
    item_name, dims = "clip", 4  # a clip (T, C, S, S)
    config_facts = {"classes": "num_classes", "grid": "grid"}

    @abstractmethod
    def input_views(self, model, item: Tensor, attention: dict, names: list[str]) -> dict:
        """The page entry's fields from the attention of one input: views, picture or frames."""

    def true_label(self, label, count: int):
        return int(label)

    @torch.no_grad()
    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        config, classes, labels = model.config, request.classes, request.labels
        if classes is None or not all(isinstance(c, str) for c in classes):
            raise InputError("a classifier's pages need its class names: pass classes=[...]")
        if len(classes) != config.num_classes:
            raise InputError(f"{len(classes)} class names for a {config.num_classes}-class model")
        if labels is not None and len(labels) != len(inputs):
            raise InputError(f"{len(labels)} labels for {len(inputs)} inputs")
        pages = []
        for index, item in enumerate(inputs):
            self._check_input(item, index, config.channels)
            logits, attention = classifier_attention(model, item[None].to(model_device(model)))
            predicted = logits[0, :, 1:].argmax(dim=-1).tolist()  # class ids, <pad> left out
            names = [classes[c] for c in predicted]
            label = labels[index] if labels is not None else None
            truth = None if label is None else self.true_label(label, len(predicted))
            shown = None if truth is None else truth if isinstance(truth, list) else [truth]
            page: dict[str, Any] = {
                "name": f"{self.item_name} {index + 1}",
                "output": " ".join(names),
                "output_tokens": names,
                "score": round(float(logits[0, :, 1:].log_softmax(-1).max(-1).values.sum()), 4),
                "prediction": predicted,
                "label": truth,
                "truth_tokens": None if shown is None else [classes[c] for c in shown],
            }
            page.update(self.input_views(model, item, attention, names))
            page["source"] = page["name"]
            page["source_tokens"] = page["views"][0]["key_tokens"]
            pages.append(page)
        return pages

    def _check_input(self, item, index: int, channels: int) -> None:
        want = "(C, S, S) pictures" if self.dims == 3 else "(T, C, S, S) clips"
        if not isinstance(item, Tensor) or item.dim() != self.dims or item.shape[-3] != channels:
            raise InputError(
                f"input {index}: a {self.kind} takes {want} with C = {channels}, got "
                f"{type(item).__name__} {tuple(getattr(item, 'shape', ()))}"
            )
        if not item.is_floating_point() or float(item.min()) < 0 or float(item.max()) > 1:
            raise InputError(f"input {index}: pixels must be floats in [0, 1] (no padding frames)")


class ImageClassifierAdapter(ClassifierAdapter):
    kind, views = "image-classifier", ("feature", "regions")
    page = IMAGE_CLASSIFIER_PAGE
    item_name, dims = "image", 3
    config_facts = {**ClassifierAdapter.config_facts, "pool": "region_pool"}

    def refusal(self, model: nn.Module) -> str | None:
        config = model.config
        if config.feature_attention or config.region_pool == "attention":
            return None
        return (
            "has neither feature-map attention nor attention pooling: nothing to explore; "
            "train with feature_attention=True or pool='attention'"
        )

    def facts(self, model: nn.Module) -> dict[str, Any]:
        return dict(super().facts(model), feature_attention=bool(model.config.feature_attention))

    def input_views(self, model, item, attention, names) -> dict:
        grid = model.config.grid
        regions = [f"({r}, {c})" for r in range(grid) for c in range(grid)]
        views = []
        if "feature" in attention:
            title = "feature-map self-attention: query region \u2192 key regions"
            views.append(_view("feature", title, regions, regions, attention["feature"]))
        if "regions" in attention:
            title = "attention pooling over the regions"
            views.append(_view("regions", title, ["pooled"], regions, attention["regions"]))
        return {"image": {"png": _png(item), "grid": [grid, grid]}, "views": views}


class ClipClassifierAdapter(ClassifierAdapter):
    kind, views = "clip-classifier", ("frames",)
    page = CLIP_CLASSIFIER_PAGE
    config_facts = {**ClassifierAdapter.config_facts, "pool": "pool"}

    def refusal(self, model: nn.Module) -> str | None:
        pool = model.config.pool
        if pool == "attention":
            return None
        return (
            f"pools its frames by {pool!r}, which has no attention weights: nothing to "
            "explore; train with pool='attention'"
        )

    def input_views(self, model, item, attention, names) -> dict:
        frames = [f"{t}" for t in range(len(item))]
        title = "attention pooling over the frames"
        view = _view("frames", title, ["clip"], frames, attention["frames"])
        return {"frames": [_png(frame) for frame in item], "views": [view]}


class FrameTaggerAdapter(ClassifierAdapter):
    kind, views = "frame-tagger", ("self",)
    page = FRAME_TAGGER_PAGE
    config_facts = {
        **ClassifierAdapter.config_facts,
        "layers": "tagger_layers",
        "heads": "num_heads",
    }

    def refusal(self, model: nn.Module) -> str | None:
        if model.config.tagger_layers:
            return None
        return (
            "has no self-attention blocks (tagger_layers=0): nothing to explore; "
            "train with tagger_layers=1 or more"
        )

    def true_label(self, label, count: int):
        label = [int(c) for c in label]
        if len(label) != count:
            raise InputError(f"{len(label)} frame labels for a clip of {count} frames")
        return label

    def input_views(self, model, item, attention, names) -> dict:
        frames = [f"{t} {name}" for t, name in enumerate(names)]
        view = _view("self", "frame self-attention", frames, frames, attention["self"])
        rollouts = attention_rollout([layer[0] for layer in attention["self"]])
        for layer, rollout in zip(view["layers"], rollouts, strict=True):
            layer["rollout"] = quantize(rollout)
            layer["rollout_summary"] = head_summary(rollout, self_attention=True)
        return {"frames": [_png(frame) for frame in item], "views": [view]}


def _view(name: str, title: str, queries, keys, layers: list[Tensor]) -> dict[str, Any]:
    """``layers``: per layer (1, H, Tq, Tk) for one input; one query row is a pooling."""
    self_attention = queries is keys
    query_side = "source" if self_attention else "output"
    weights = [layer[0] for layer in layers]  # (H, Tq, Tk)
    view = attention_view(name, title, queries, keys, query_side, "source", weights)
    view["kind"] = "self" if self_attention else "pooling"
    return view


def _png(picture: Tensor) -> str:
    return png_data_uri(picture.expand(3, -1, -1) if picture.shape[0] == 1 else picture)


register_explorer("image-classifier", ImageClassifierAdapter())
register_explorer("clip-classifier", ClipClassifierAdapter())
register_explorer("frame-tagger", FrameTaggerAdapter())
