"""The explorer's views: each attention of one decoded input as labelled, rounded matrices
with their per-head summaries (the ``views`` entries of the page's data)."""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from qkv.data import BOS_ID
from qkv.errors import InputError

from .extract import Decoded, teacher_forced_attention
from .registry import PageKind
from .summaries import attention_rollout, head_summary, quantize
from .vectors import catch_vectors, chosen_layers, stored_from

__all__ = [
    "png_data_uri",
    "model_device",
    "attention_view",
    "transformer_views",
    "seq2seq_views",
    "with_rollout",
    "self_attention_entry",
    "alignment_view",
    "token_labels",
    "decoded_text",
    "ENCODER_PAGE",
]

VIEW_TITLES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "decoder \u2192 encoder cross-attention",
}


def _encoder_info(m: Mapping[str, Any]) -> str:
    sizes = f"{m['layers']} layers, {m['heads']} heads"
    return f"{m.get('architecture') or 'encoder'}: {sizes}, bidirectional"


#: A text encoder's page: the tokens' self-attention, both ways, in every layer and head.
#: Declared here, below its two adapters (pretrained.py's BERT, and transformers_folders.py's
#: encoder folders, which pretrained.py opens): neither module imports the other's page.
ENCODER_PAGE = PageKind(info=_encoder_info, multi_head=True, source_row="tokens")


def transformer_views(
    model, source, best: Decoded, source_tokens, tokenizer, vectors=None
) -> list[dict]:
    """Encoder self-, decoder self- and cross-attention of every layer and head for one
    hypothesis, with the encoder's rollout per layer, and for the layers ``vectors`` asks
    for (None, "all" or layer numbers) each attention's q, k and v for the neuron view.
    Shapes: source (1, S) token ids."""
    target_input = torch.tensor([[BOS_ID, *best.ids]], device=source.device)
    modules = {
        "encoder": [block.self_attention for block in model.encoder.layers],
        "decoder": [block.self_attention for block in model.decoder.layers],
        "cross": [block.cross_attention for block in model.decoder.layers],
    }
    with contextlib.ExitStack() as stack:
        caught = {
            name: stack.enter_context(catch_vectors(found, chosen_layers(vectors, len(found))))
            for name, found in modules.items()
        }
        attention = teacher_forced_attention(model, source, target_input)
    inputs = ["<s>", *token_labels(tokenizer, best.ids)]
    produced = [*inputs[1:], _end_label(best)]
    count = {name: len(found) for name, found in modules.items()}
    return seq2seq_views(
        attention,
        source_tokens,
        inputs,
        produced,
        lambda name, layers: stored_from(caught[name], vectors, count[name]),
    )


def seq2seq_views(attention, source_tokens, inputs, produced, vectors_of) -> list[dict]:
    """The encoder's self-, the decoder's causal self- and the cross-attention views of one
    decoded text, in that order, the encoder's with its rollout per layer.

    attention: {"encoder", "decoder", "cross": per layer (H, Tq, Tk) weights}.
    inputs: the decoder's input labels (its start token first); produced: what each of
        its steps predicted (the inputs after the start, then the end or "\u2026").
    vectors_of: (view name, its layers) -> the view's stored q, k, v (``vectors``)."""
    sides = {
        "encoder": (source_tokens, source_tokens, "source", "source"),
        "decoder": (inputs, inputs, "target", "target"),
        "cross": (produced, source_tokens, "target", "source"),
    }
    views = []
    for name, (queries, keys, query_side, key_side) in sides.items():
        layers = attention[name]
        view = attention_view(name, VIEW_TITLES[name], queries, keys, query_side, key_side, layers)
        if name == "encoder":
            with_rollout(view, layers)
        view.update(causal=name == "decoder", vectors=vectors_of(name, layers))
        views.append(view)
    return views


def with_rollout(view: dict, layers: Sequence[Tensor]) -> dict:
    """``view`` with each layer's attention rollout (up to it) and its summary added."""
    for entry, rollout in zip(view["layers"], attention_rollout(layers), strict=True):
        entry["rollout"] = quantize(rollout)
        entry["rollout_summary"] = head_summary(rollout, self_attention=True)
    return view


def self_attention_entry(
    text: str,
    tokens: Sequence[str],
    layers: Sequence[Tensor],
    *,
    name: str = "encoder",
    title: str = VIEW_TITLES["encoder"],
    causal: bool = False,
    vectors: dict | None = None,
    output: str = "",
    view: dict | None = None,
) -> dict[str, Any]:
    """The page's entry of one input with one self-attention view (an encoder's text, a
    vision model's picture): every weight with the rollout, or the (compact) ``view`` given.
    Shapes: layers, per layer (H, T, T) with T = len(tokens)."""
    if view is None:
        view = attention_view(name, title, tokens, tokens, "source", "source", layers)
        with_rollout(view, layers)
    view.update(causal=causal, vectors=vectors or {})
    return {
        "name": text,
        "source": text,
        "source_tokens": list(tokens),
        "output": output,
        "output_tokens": [],
        "views": [view],
    }


def alignment_view(model, source, found: Decoded, key_tokens, tokenizer, kind="alignment"):
    """One hypothesis: its (T, S) alignment from a teacher-forced pass with need_weights."""
    target_input = torch.tensor([[BOS_ID, *found.ids]], device=source.device)
    weights = teacher_forced_attention(model, source, target_input)["cross"]
    produced = [*token_labels(tokenizer, found.ids), _end_label(found)]
    title = f"{found.search}: score {found.score:.3f}"
    view = attention_view(found.search, title, produced, key_tokens, "target", "source", weights)
    view.update(
        kind=kind,
        output=decoded_text(tokenizer, found.ids),
        score=found.score,
        normalized_score=found.normalized_score,
        finished=found.finished,
    )
    return view


def attention_view(name, title, queries, keys, query_side, key_side, layers) -> dict[str, Any]:
    """One view of the page: per layer (H, Tq, Tk) weights, rounded, with their summaries."""
    self_attention = query_side == key_side
    rows = []
    for weights in layers:  # (H, Tq, Tk)
        if weights.shape[1:] != (len(queries), len(keys)):
            raise InputError(
                f"{name}: weights of shape {tuple(weights.shape)} do not match "
                f"{len(queries)} query and {len(keys)} key tokens"
            )
        rows.append(
            {
                "heads": [quantize(head) for head in weights],
                "summaries": [head_summary(h, self_attention=self_attention) for h in weights],
                "mean_summary": head_summary(weights.mean(0), self_attention=self_attention),
            }
        )
    return {
        "id": name,
        "title": title,
        "kind": "self" if self_attention else "cross",
        "query_side": query_side,
        "key_side": key_side,
        "query_tokens": list(queries),
        "key_tokens": list(keys),
        "layers": rows,
    }


# -- labels ----------------------------------------------------------------------------------


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Token strings: a Tokenizer's ``tokens(ids)``, or a word vocabulary's ``tokens`` list."""
    tokens = getattr(tokenizer, "tokens", None)
    if callable(tokens):
        return list(tokens(ids))
    if isinstance(tokens, Sequence):
        return [tokens[i] if 0 <= i < len(tokens) else f"<{i}>" for i in ids]
    return [str(i) for i in ids]


def decoded_text(tokenizer, ids: Sequence[int]) -> str:
    decoded = tokenizer.decode(ids) if callable(getattr(tokenizer, "decode", None)) else None
    if isinstance(decoded, list):  # a word vocabulary decodes to words
        return " ".join(decoded)
    return decoded if isinstance(decoded, str) else " ".join(token_labels(tokenizer, ids))


def _end_label(found: Decoded) -> str:
    """What the last step predicted: </s>, or the next token of a hypothesis cut at max_len."""
    return "</s>" if found.finished else "\u2026"


# -- pictures ---------------------------------------------------------------------------------


def png_data_uri(image: Tensor) -> str:
    """An image as an inline ``data:image/png;base64,...`` URI.  Shapes: (3, H, W) in [0, 1]."""
    pixels = (image.detach().float().cpu().clamp(0, 1) * 255).round().to(torch.uint8)
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels.permute(1, 2, 0).numpy())).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def model_device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
