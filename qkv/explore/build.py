"""``explore(model, inputs)``: a model's attention on some inputs as one JSON-able dict, the
data of the explorer page (its schema is documented in docs/explorer.md).

- Transformer: the best hypothesis of the search, then the encoder self-, decoder self- and
  cross-attention of every layer and head (plus, per layer, the encoder's attention rollout).
- RNN with attention: the target x source alignment of the greedy hypothesis and of every
  beam hypothesis, each with its score.
- Captioner: the same per hypothesis over the image regions, the gate beta per word where
  the model has one, and the picture itself (PNG, inline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from qkv.data import BOS_ID
from qkv.errors import InputError

from .classifiers import classifier_inputs
from .extract import CLASSIFIERS, decode_hypotheses, explorable_kind
from .summaries import WEIGHT_SCALE
from .views import (
    alignment_view,
    decoded_text,
    model_device,
    png_data_uri,
    token_labels,
    transformer_views,
)

__all__ = ["explore", "FORMAT", "VERSION"]

FORMAT, VERSION = "qkv-explorer", 1


@torch.no_grad()
def explore(
    model: nn.Module,
    inputs: Sequence[str | Sequence[int] | Tensor],
    *,
    tokenizer: Any,
    beam: int = 1,
    length_penalty: float = 1.0,
    max_len: int | None = None,
    names: Sequence[str] | None = None,
    labels: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Decode each input and gather the attention the explorer page shows, as plain data.

    model: a Transformer, an RNNTranslator, a Captioner or a classifier (image-classifier,
        clip-classifier, frame-tagger); models without attention weights are refused.
    inputs: source sentences (str, or lists of token ids) for a translator; images
        (3, H, W) floats in [0, 1] for a captioner; pictures (C, S, S) for an image
        classifier; clips (T, C, S, S) for a clip classifier or a frame tagger.
    tokenizer: the translator's tokenizer (``encode``/``tokens``), the captioner's word
        vocabulary, or a classifier's class names, to label the tokens.
    beam: 1 decodes greedily; above 1 a Transformer shows the best beam hypothesis and an
        RNN or captioner shows the greedy one beside every beam hypothesis.
    max_len: the most tokens to generate (default: 1.5 x the source + 10 for translators,
        the config's max_len - 1 for captioners).
    names: a label per input for the page's list (default: the sentence, or "image N").
    labels: classifiers only: per input the true class id (a frame tagger: one per frame),
        or None where unknown; beam, length_penalty and max_len do not apply to them.

    Render the result with :func:`qkv.explore.render_html`.
    """
    kind = explorable_kind(model)
    if isinstance(inputs, (str, Tensor)) and not (isinstance(inputs, Tensor) and inputs.dim() == 4):
        raise InputError("explore takes a list of inputs, not one input")
    inputs = list(inputs)
    if not inputs:
        raise InputError("explore needs at least one input")
    if names is not None and len(names) != len(inputs):
        raise InputError(f"{len(names)} names for {len(inputs)} inputs")
    was_training = model.training
    model.eval()
    try:
        if kind in CLASSIFIERS:
            classes = tokenizer if isinstance(tokenizer, Sequence) else None
            if classes is None or not all(isinstance(c, str) for c in classes):
                raise InputError("a classifier's tokenizer is its list of class names")
            pages = classifier_inputs(model, kind, inputs, classes=classes, labels=labels)
            return _data(model, kind, pages, names)
        if labels is not None:
            raise InputError("labels are for classifiers; a translator or captioner has none")
        build = _image_input if kind == "captioner" else _sentence_input
        pages = [
            build(
                model,
                kind,
                item,
                index,
                tokenizer=tokenizer,
                beam=beam,
                max_len=max_len,
                length_penalty=length_penalty,
            )
            for index, item in enumerate(inputs)
        ]
    finally:
        model.train(was_training)
    return _data(model, kind, pages, names)


def _data(model: nn.Module, kind: str, pages: list[dict], names) -> dict[str, Any]:
    if names is not None:
        for page, name in zip(pages, names, strict=True):
            page["name"] = str(name)
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": _model_facts(model, kind),
        "weight_scale": WEIGHT_SCALE,
        "inputs": pages,
    }


def _model_facts(model: nn.Module, kind: str) -> dict[str, Any]:
    config = model.config
    facts: dict[str, Any] = {"kind": kind, "class": type(model).__name__}
    if kind == "transformer":
        facts.update(
            encoder_layers=config.num_encoder_layers,
            decoder_layers=config.num_decoder_layers,
            heads=config.num_heads,
        )
    elif kind == "captioner":
        facts.update(grid=config.grid, gate=bool(config.gate), score=config.score)
    elif kind in CLASSIFIERS:
        facts.update(classes=config.num_classes, grid=config.grid)
        if kind == "frame-tagger":
            facts.update(layers=config.tagger_layers, heads=config.num_heads)
        else:
            facts.update(pool=config.pool if kind == "clip-classifier" else config.region_pool)
        if kind == "image-classifier":
            facts.update(feature_attention=bool(config.feature_attention))
    else:
        facts.update(score=config.attention)
    return facts


# -- translators --------------------------------------------------------------------------


def _sentence_input(model, kind, item, index, *, tokenizer, beam, max_len, length_penalty):
    ids = _source_ids(item, index, tokenizer)
    limit = getattr(model.config, "max_len", None) if kind == "transformer" else None
    if limit is not None and len(ids) > limit:
        raise InputError(
            f"input {index} has {len(ids)} tokens; the model's positions reach {limit}: "
            "shorten it or split it"
        )
    if max_len is None:
        max_len = int(1.5 * len(ids)) + 10
        if limit is not None:
            max_len = min(max_len, limit - 1)
    elif limit is not None and max_len > limit - 1:
        raise InputError(
            f"max_len={max_len}: the model's positions reach {limit}, so at most "
            f"{limit - 1} tokens can follow <s>"
        )
    source = torch.tensor([ids], device=model_device(model))
    hypotheses = decode_hypotheses(
        model, source, max_len=max_len, beam=beam, length_penalty=length_penalty
    )
    source_tokens = token_labels(tokenizer, ids)
    if kind == "transformer":
        best = hypotheses[1] if beam > 1 else hypotheses[0]  # the beam's best, else greedy
        views = transformer_views(model, source, best, source_tokens, tokenizer)
        shown = [best]
    else:
        views = [
            alignment_view(model, source, found, source_tokens, tokenizer) for found in hypotheses
        ]
        shown = hypotheses
    text = item if isinstance(item, str) else " ".join(source_tokens)
    return {
        "name": text,
        "source": text,
        "source_tokens": source_tokens,
        "output": decoded_text(tokenizer, shown[0].ids),
        "output_tokens": token_labels(tokenizer, shown[0].ids),
        "score": shown[0].score,
        "views": views,
    }


def _source_ids(item, index: int, tokenizer) -> list[int]:
    if isinstance(item, str):
        if not item.strip():
            raise InputError(f"input {index} is an empty sentence: nothing to translate")
        if not callable(getattr(tokenizer, "encode", None)):
            raise InputError("sentences need a tokenizer with encode(); pass tokenizer=...")
        ids = tokenizer.encode(item.strip())
    elif isinstance(item, Tensor) and item.dim() == 1 and not item.is_floating_point():
        ids = item.tolist()
    elif isinstance(item, Sequence) and all(isinstance(i, int) for i in item):
        ids = list(item)
    else:
        raise InputError(
            f"input {index} is a {type(item).__name__}; a translator takes sentences (str) or "
            "lists of token ids"
        )
    if not ids:
        raise InputError(f"input {index} has no tokens: nothing to translate")
    return ids


# -- captioners ---------------------------------------------------------------------------


def _image_input(model, kind, item, index, *, tokenizer, beam, max_len, length_penalty):
    if not isinstance(item, Tensor) or item.dim() != 3 or item.shape[0] != 3:
        raise InputError(
            f"input {index}: a captioner takes images (3, H, W), got "
            f"{type(item).__name__} {tuple(getattr(item, 'shape', ()))}"
        )
    if not item.is_floating_point() or float(item.min()) < 0 or float(item.max()) > 1:
        raise InputError(f"input {index}: image pixels must be floats in [0, 1]")
    config = model.config
    max_len = max_len if max_len is not None else config.max_len - 1
    image = item[None].to(model_device(model))
    hypotheses = decode_hypotheses(
        model, image, max_len=max_len, beam=beam, length_penalty=length_penalty
    )
    grid = config.grid
    regions = [f"({row}, {col})" for row in range(grid) for col in range(grid)]
    views = []
    for found in hypotheses:
        view = alignment_view(model, image, found, regions, tokenizer, kind="image")
        if config.gate:
            target_input = torch.tensor([[BOS_ID, *found.ids]], device=image.device)
            gates = model.decode_teacher_forced(image, target_input).gates[0]  # (T,)
            view["gates"] = [round(float(g), 4) for g in gates]
        views.append(view)
    greedy = hypotheses[0]
    return {
        "name": f"image {index + 1}",
        "source": f"image {index + 1}",
        "source_tokens": regions,
        "output": views[0]["output"],
        "output_tokens": token_labels(tokenizer, greedy.ids),
        "score": greedy.score,
        "image": {"png": png_data_uri(item), "grid": [grid, grid]},
        "views": views,
    }
