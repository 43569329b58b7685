"""Explorer adapters for the encoder-decoder families, which decode each input first:

- Transformer: the best hypothesis of the search, then the encoder self-, decoder self- and
  cross-attention of every layer and head (plus, per layer, the encoder's attention rollout,
  and q, k, v of the layers asked for, for the neuron view).
- RNN with attention: the target x source alignment of the greedy hypothesis and of every
  beam hypothesis, each with its score.
- Captioner: the same per hypothesis over the image regions, the gate beta per word where
  the model has one, and the picture itself (PNG, inline).
- The RNN baseline and a captioner without attention: refused, with the fix.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from qkv.data import BOS_ID, EOS_ID, PAD_ID
from qkv.errors import InputError
from qkv.models.rnn_decoders import BahdanauDecoder

from .extract import Decoded, decode_hypotheses
from .registry import ExplorerAdapter, ExploreRequest, PageKind, register_explorer
from .views import (
    alignment_view,
    decoded_text,
    model_device,
    png_data_uri,
    token_labels,
    transformer_views,
)

__all__ = [
    "TransformerAdapter",
    "RNNAdapter",
    "CaptionerAdapter",
    "NoAttention",
    "TRANSFORMER_PAGE",
    "RNN_PAGE",
    "CAPTIONER_PAGE",
]

#: The RNN scores script/live/rnn.js computes.
LIVE_SCORES = ("additive", "dot", "scaled_dot", "general", "bilinear")

BASELINE = (
    "is the baseline without attention: it has no attention weights to explore; "
    "train 'rnn-attention' (or a captioner with attention) instead"
)


def _transformer_info(m: Mapping[str, Any]) -> str:
    layers = f"{m['encoder_layers']} + {m['decoder_layers']} layers"
    return f"{m.get('architecture') or 'Transformer'}: {layers}, {m['heads']} heads"


#: An encoder-decoder's page: the source, the output, every layer and head of three
#: attentions (a folder read by transformers fills it too).
TRANSFORMER_PAGE = PageKind(
    info=_transformer_info, multi_head=True, source_row="source", target_row="output"
)
#: An RNN translator's page: one alignment per hypothesis, the hypotheses side by side.
RNN_PAGE = PageKind(
    info=lambda m: f"RNN translator: {m['score']} attention",
    multi_head=False,
    source_row="source",
    target_row="output",
    grid_title="every hypothesis, side by side",
)
#: A captioner's page: the caption's words over the picture's regions, per hypothesis.
CAPTIONER_PAGE = PageKind(
    info=lambda m: f"captioner: {m['grid']}\u00d7{m['grid']} regions, {m['score']} score",
    multi_head=False,
    target_row="caption",
    term="word",
    grid_title="every hypothesis, side by side",
)


class NoAttention(ExplorerAdapter):
    """A registered family that computes no attention weights: every model is refused."""

    kind, views = "none", ()

    def refusal(self, model: nn.Module) -> str | None:
        return BASELINE

    def pages(self, model, inputs, request):
        return []


class TranslatorAdapter(ExplorerAdapter):
    """A translator on source sentences (str, or lists of token ids): ``tokenizer`` encodes
    them and labels the tokens.  A family says which hypotheses it shows (``shown``), their
    views (``hypothesis_views``) and how far its positions reach (``positions``)."""

    def positions(self, model: nn.Module) -> int | None:
        return None

    @abstractmethod
    def shown(self, hypotheses: list[Decoded], beam: int) -> list[Decoded]:
        """The hypotheses the page shows, out of greedy then every beam one."""

    @abstractmethod
    def hypothesis_views(
        self, model, source, shown, source_tokens, tokenizer, vectors=None
    ) -> list[dict]:
        """The page's views of the hypotheses shown (with q, k and v of the layers
        ``vectors`` asks for, where the family has a neuron view)."""

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        return [self._page(model, item, index, request) for index, item in enumerate(inputs)]

    def _page(self, model, item, index: int, request: ExploreRequest) -> dict[str, Any]:
        tokenizer = request.tokenizer
        ids = _source_ids(item, index, tokenizer)
        max_len = _decoding_length(request.max_len, len(ids), self.positions(model), index)
        source = torch.tensor([ids], device=model_device(model))
        hypotheses = decode_hypotheses(
            model,
            source,
            max_len=max_len,
            beam=request.beam,
            length_penalty=request.length_penalty,
        )
        source_tokens = token_labels(tokenizer, ids)
        shown = self.shown(hypotheses, request.beam)
        text = item if isinstance(item, str) else " ".join(source_tokens)
        return {
            "name": text,
            "source": text,
            "source_tokens": source_tokens,
            "output": decoded_text(tokenizer, shown[0].ids),
            "output_tokens": token_labels(tokenizer, shown[0].ids),
            "score": shown[0].score,
            "views": self.hypothesis_views(
                model, source, shown, source_tokens, tokenizer, request.vectors
            ),
        }


class TransformerAdapter(TranslatorAdapter):
    """The best hypothesis (the beam's, else greedy) and its three attentions."""

    kind, views = "transformer", ("encoder", "decoder", "cross")
    page = TRANSFORMER_PAGE
    vectors = True
    live = "transformer"
    config_facts = {
        "encoder_layers": "num_encoder_layers",
        "decoder_layers": "num_decoder_layers",
        "heads": "num_heads",
    }

    def positions(self, model: nn.Module) -> int | None:
        return model.config.max_len

    def shown(self, hypotheses: list[Decoded], beam: int) -> list[Decoded]:
        return [hypotheses[1] if beam > 1 else hypotheses[0]]

    def live_config(self, model: nn.Module) -> dict[str, Any]:
        """script/live/transformer.js's facts: sizes, blocks, positions, special ids."""
        config = model.config
        return {
            "d_model": config.d_model,
            "heads": config.num_heads,
            "encoder_layers": config.num_encoder_layers,
            "decoder_layers": config.num_decoder_layers,
            "activation": config.activation,
            "norm_first": config.norm_first,
            "final_norm": config.uses_final_norm,
            "positions": config.positions,
            "max_len": config.max_len,
            "embedding_scale": model.embedding_scale,
            "eps": config.layer_norm_eps,
            "encoder_window": config.encoder_window,
            **_special_ids(),
        }

    def hypothesis_views(
        self, model, source, shown, source_tokens, tokenizer, vectors=None
    ) -> list[dict]:
        return transformer_views(model, source, shown[0], source_tokens, tokenizer, vectors)


class RNNAdapter(TranslatorAdapter):
    """The greedy hypothesis and every beam hypothesis, each with its alignment."""

    kind, views = "rnn-attention", ("greedy", "beam N")
    page = RNN_PAGE
    config_facts = {"score": "attention"}
    live = "rnn"

    def live_config(self, model: nn.Module) -> dict[str, Any]:
        """script/live/rnn.js's facts: the cell, the layers, which decoder and score."""
        config = model.config
        decoder = model.decoder
        if config.attention not in LIVE_SCORES:
            raise InputError(
                f"the live page computes the scores {', '.join(LIVE_SCORES)}, not "
                f"{config.attention!r}: write a static page"
            )
        return {
            "cell": config.cell,
            "hidden": config.hidden_dim,
            "layers": config.num_layers,
            "decoder": "bahdanau" if isinstance(decoder, BahdanauDecoder) else "luong",
            "score": config.attention,
            "input_feeding": bool(getattr(decoder, "input_feeding", False)),
            "project_keys": isinstance(getattr(decoder.attention, "key_proj", None), nn.Linear),
            "max_len": config.max_len,
            **_special_ids(),
        }

    def shown(self, hypotheses: list[Decoded], beam: int) -> list[Decoded]:
        return hypotheses

    def hypothesis_views(
        self, model, source, shown, source_tokens, tokenizer, vectors=None
    ) -> list[dict]:
        return [alignment_view(model, source, h, source_tokens, tokenizer) for h in shown]


def _special_ids() -> dict[str, int]:
    return {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}


def _decoding_length(max_len: int | None, source_length: int, limit: int | None, index: int):
    """The most tokens to generate: as asked, else 1.5 x the source + 10, within the model's
    positions (``limit``, None for a model without a length limit)."""
    if limit is not None and source_length > limit:
        raise InputError(
            f"input {index} has {source_length} tokens; the model's positions reach {limit}: "
            "shorten it or split it"
        )
    if max_len is None:
        max_len = int(1.5 * source_length) + 10
        return max_len if limit is None else min(max_len, limit - 1)
    if limit is not None and max_len > limit - 1:
        raise InputError(
            f"max_len={max_len}: the model's positions reach {limit}, so at most "
            f"{limit - 1} tokens can follow <s>"
        )
    return max_len


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


class CaptionerAdapter(ExplorerAdapter):
    """A captioner on images (3, H, W) in [0, 1]; ``tokenizer`` is its word vocabulary."""

    kind, views = "captioner", ("greedy", "beam N")
    page = CAPTIONER_PAGE
    config_facts = {"grid": "grid", "gate": "gate", "score": "score"}  # gate: a checked bool

    def refusal(self, model: nn.Module) -> str | None:
        return None if model.config.attention else BASELINE

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        return [self._page(model, item, index, request) for index, item in enumerate(inputs)]

    def _page(self, model, item, index: int, request: ExploreRequest) -> dict[str, Any]:
        if not isinstance(item, Tensor) or item.dim() != 3 or item.shape[0] != 3:
            raise InputError(
                f"input {index}: a captioner takes images (3, H, W), got "
                f"{type(item).__name__} {tuple(getattr(item, 'shape', ()))}"
            )
        if not item.is_floating_point() or float(item.min()) < 0 or float(item.max()) > 1:
            raise InputError(f"input {index}: image pixels must be floats in [0, 1]")
        config, vocab = model.config, request.tokenizer
        max_len = request.max_len if request.max_len is not None else config.max_len - 1
        image = item[None].to(model_device(model))
        hypotheses = decode_hypotheses(
            model, image, max_len=max_len, beam=request.beam, length_penalty=request.length_penalty
        )
        grid = config.grid
        regions = [f"({row}, {col})" for row in range(grid) for col in range(grid)]
        views = []
        for found in hypotheses:
            view = alignment_view(model, image, found, regions, vocab, kind="image")
            if config.gate:
                target_input = torch.tensor([[BOS_ID, *found.ids]], device=image.device)
                gates = model.decode_teacher_forced(image, target_input).gates[0]  # (T,)
                view["gates"] = [round(float(g), 4) for g in gates]
            views.append(view)
        return {
            "name": f"image {index + 1}",
            "source": f"image {index + 1}",
            "source_tokens": regions,
            "output": views[0]["output"],
            "output_tokens": token_labels(vocab, hypotheses[0].ids),
            "score": hypotheses[0].score,
            "image": {"png": png_data_uri(item), "grid": [grid, grid]},
            "views": views,
        }


register_explorer("transformer", TransformerAdapter())
register_explorer("rnn-attention", RNNAdapter())
register_explorer("captioner", CaptionerAdapter())
register_explorer("rnn", NoAttention())
