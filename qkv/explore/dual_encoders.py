"""Dual encoders read by transformers on the explorer: a whole CLIP or SigLIP folder (any
model transformers lists for zero-shot image classification whose two towers call the
attention interface), loaded as ``transformers_folders`` loads every folder, with
``attn_implementation="qkv"``.

**Inputs and how they pair.** The inputs are texts and image files together, at least one
of each (an input that names an existing file with an image suffix is an image; every other
one is a text).  The model compares every image with every text: it runs once per text, on
that text and all the images, and its ``logits_per_image`` give each pair's logit.  The page
has one entry per input, in the order given:

- an image's entry: the vision tower's self-attention (view ``vision``), each query patch's
  weights drawn over the picture the model saw, as on a vision model's page, and the
  image's similarity to every text (``similarity``: the logits and the probabilities the
  model's own training gives them -- CLIP's contrastive loss a softmax over the texts,
  SigLIP's sigmoid loss each pair's sigmoid: :func:`pair_probabilities`); its ``output`` is
  the likeliest text;
- a text's entry: the text tower's self-attention (view ``text``) over the tokens of the
  folder's tokenizer, causal where the tower is (CLIP's: then shown as causal), and the
  text's probability under each image.

A dual encoder has no cross-attention: each tower reads only its own input, so an input's
attention is the same whichever other inputs are given, and only the similarity pairs them.
``qkv attention`` (:meth:`DualEncoderAdapter.input_attention`) reads one input, a text or an
image file, and writes that tower's attention.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from qkv.errors import InputError

from .registry import ExploreRequest, PageKind, register_explorer
from .transformers_folders import (
    ADAPTERS,
    IMAGE_SUFFIXES,
    Call,
    TransformersDualEncoder,
    VisionFolderAdapter,
    _device,
    _is_image,
    _layers,
    _stored,
    caught_calls,
    image_entry,
    patch_labels,
    patch_size,
)
from .views import decoded_text, self_attention_entry

__all__ = ["DualEncoderAdapter", "DualRun", "run_dual", "run_tower", "split_inputs"]

VISION_TITLE = "vision tower: patch self-attention"


@dataclass
class DualRun:
    """The model on some texts and images: per text and per image its tower's weights (per
    layer (H, T, T)) and interface calls, and the logits of every pair.  Shapes: logits
    (images, texts), the model's ``logits_per_image``."""

    text: list[list[Tensor]]
    vision: list[list[Tensor]]
    logits: Tensor
    text_calls: list[list[Call]]
    vision_calls: list[list[Call]]


@torch.no_grad()
def run_dual(
    model: TransformersDualEncoder, texts: Sequence[Sequence[int]], pixels: Tensor, keep=""
) -> DualRun:
    """Run the model once per text (its ids, unpadded: a tower that pools its last token
    reads no padding) on all the images; the calls hold ``keep``'s tensors ("q", "k", "v").
    Shapes: pixels (images, C, H, W) as the folder's image processor makes them."""
    device, count = _device(model), pixels.shape[0]
    tower = model.text_tower()
    # each call is the text tower's or the vision tower's, told apart by its module
    in_text = None if tower is model.hf else {id(module) for module in tower.modules()}
    text, text_calls, columns = [], [], []
    vision, vision_calls = None, None
    for ids in texts:
        tensor = torch.tensor([list(ids)], device=device)
        with caught_calls(keep, whole=True) as calls:
            output = model.hf(
                input_ids=tensor,
                attention_mask=torch.ones_like(tensor),
                pixel_values=pixels.to(device),
                output_attentions=True,
            )
        towers = [getattr(output, f"{name}_model_output", None) for name in ("text", "vision")]
        logits = getattr(output, "logits_per_image", None)
        if logits is None or any(t is None for t in towers):
            raise InputError(
                f"{model.architecture} returned no logits_per_image, text_model_output and "
                "vision_model_output: the explorer reads dual encoders that return them "
                "(CLIP, SigLIP, ...)"
            )
        text.append(_layers(towers[0].attentions, "text self-attention"))
        columns.append(logits[:, 0].detach().float().cpu())
        mine = [c for c in calls if in_text is not None and id(c.module) in in_text]
        text_calls.append([_item(call, 0) for call in mine])
        if vision is None:  # the images' attention is the same whatever the text
            vision = [
                _layers(towers[1].attentions, "vision self-attention", i) for i in range(count)
            ]
            theirs = [c for c in calls if in_text is not None and id(c.module) not in in_text]
            vision_calls = [[_item(call, i) for call in theirs] for i in range(count)]
    return DualRun(text, vision, torch.stack(columns, dim=1), text_calls, vision_calls)


def _item(call: Call, item: int) -> Call:
    """The call of a whole batch (``caught_calls(whole=True)``) for one of its sequences."""
    pick = [None if t is None else t[item] for t in (call.query, call.key, call.value)]
    return Call(*pick, call.scale, call.modified, call.module)


@torch.no_grad()
def run_tower(model: TransformersDualEncoder, tower: str, **inputs: Tensor) -> list[Tensor]:
    """One tower ("text" or "vision": the model's ``text_model`` or ``vision_model``) on one
    input: per layer its (H, T, T) weights.  Shapes: input_ids (1, T); pixel_values
    (1, C, H, W)."""
    module = getattr(model.hf, f"{tower}_model", None)
    if module is None:
        raise InputError(
            f"{model.architecture} has no {tower}_model to read one input with: give the "
            "explorer its texts and images together"
        )
    device = _device(model)
    output = module(**{k: v.to(device) for k, v in inputs.items()}, output_attentions=True)
    return _layers(output.attentions, f"{tower} self-attention")


def split_inputs(
    model, inputs: Sequence[Any]
) -> tuple[list[tuple[int, str]], list[tuple[int, Any]]]:
    """(index, text) and (index, image file) of the inputs, at least one of each."""
    texts, images = [], []
    for index, item in enumerate(inputs):
        if _is_image(item):
            images.append((index, item))
        elif isinstance(item, (str, Path)) and Path(str(item)).suffix.lower() in IMAGE_SUFFIXES:
            raise InputError(f"input {index}: no image file {str(item)!r}")
        else:
            texts.append((index, item))
    if not texts or not images:
        given = "texts" if texts else "image files"
        raise InputError(
            f"{model.architecture} is a dual encoder: give image files and texts together "
            f'(e.g. cat.png "a photo of a cat" "a photo of a dog"), and each image is compared '
            f"with every text; only {given} were given"
        )
    return texts, images


def causal(layers: Sequence[Tensor]) -> bool:
    """Whether no query of any layer and head weighs a key after it (a causal tower)."""
    return all(bool((weights.triu(1) == 0).all()) for weights in layers)


def pair_probabilities(hf: Any, logits: Tensor) -> tuple[Tensor, bool]:
    """The probabilities a dual encoder's training gives its (images, texts) logits, and
    whether they are a softmax over the texts: a model trained with SigLIP's sigmoid loss
    (it has a ``logit_bias``) scores each pair on its own, sigmoid(logit); CLIP's contrastive
    loss makes them a softmax over the texts (the zero-shot classification)."""
    if getattr(hf, "logit_bias", None) is not None:
        return logits.sigmoid(), False
    return logits.softmax(dim=1), True


def similarity(title: str, names: Sequence[str], logits: Tensor, shares: Tensor) -> dict:
    """An entry's ``similarity``: per input of the other tower its logit and probability."""
    return {
        "title": title,
        "names": list(names),
        "logits": [round(float(x), 4) for x in logits],
        "probabilities": [round(float(x), 4) for x in shares],
    }


def _dual_info(m: Mapping[str, Any]) -> str:
    """The header's line: the two towers and how the inputs pair."""
    patch = f"{m['patch']}\u00d7{m['patch']}-pixel " if m.get("patch") else ""
    return (
        f"{m['architecture']}: dual encoder; text tower {m['text_layers']} layers, "
        f"{m['text_heads']} heads; vision tower {m['vision_layers']} layers, "
        f"{m['vision_heads']} heads over {patch}patches; every image against every text"
    )


#: A dual encoder's page: a vision page's picture and patches, without token rows.
DUAL_ENCODER_PAGE = PageKind(info=_dual_info, multi_head=True, term="query", pick_regions=True)


class DualEncoderAdapter(VisionFolderAdapter):
    """A dual encoder on texts and image files (see the module's docstring)."""

    kind, views = "dual-encoder", ("text", "vision")
    page = DUAL_ENCODER_PAGE

    def facts(self, model) -> dict[str, Any]:
        """Each tower's layers and heads, the patch side, and what computed the weights."""
        config = model.hf.config
        text, vision = config.get_text_config(), getattr(config, "vision_config", config)
        return {
            "architecture": model.architecture,
            "implementation": model.implementation,
            "text_layers": text.num_hidden_layers,
            "text_heads": text.num_attention_heads,
            "vision_layers": vision.num_hidden_layers,
            "vision_heads": vision.num_attention_heads,
            "patch": patch_size(model),
        }

    def text_attention(self, model, tokenizer, text, index: int = 0):
        """The ids of one text and per layer the text tower's (H, T, T) weights on it."""
        ids = self.ids(model, tokenizer, text, index)
        return ids, run_tower(model, "text", input_ids=torch.tensor([ids]))

    def input_attention(self, model, tokenizer, item, target=None) -> dict[str, Any]:
        """The attention of the tower that reads ``item`` (a text, or an image file)."""
        if target is not None:
            raise InputError(
                "a target text is for encoder-decoder models; a dual encoder reads one text or "
                "one image file"
            )
        if _is_image(item):
            pixels, _ = self.prepared(model, item, 0)
            layers = run_tower(model, "vision", pixel_values=pixels)
            view, (tokens, _) = "vision", patch_labels(model, pixels, layers[0].shape[-1])
        else:
            view, (ids, layers) = "text", self.text_attention(model, tokenizer, item)
            tokens = tokenizer.tokens(ids)
        return {
            "attention": {view: layers},
            "tokens": {"tokens": tokens},
            "plot": (view, tokens, tokens),
        }

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        """One entry per input, in the order given (the module's docstring)."""
        tokenizer = request.tokenizer
        texts, images = split_inputs(model, inputs)
        ids = [self.ids(model, tokenizer, text, index) for index, text in texts]
        prepared = [self.prepared(model, item, index) for index, item in images]
        pixels = torch.cat([p for p, _ in prepared])
        run = run_dual(model, ids, pixels, "qkv" if request.vectors else "")
        shares, over_texts = pair_probabilities(model.hf, run.logits)  # (images, texts)
        text_title, image_title = (
            ("P(this text | image)", "P(text | this image)")
            if over_texts
            else ("P(match with image)", "P(match with text)")
        )
        text_names = [text for _, text in texts]
        image_names = [Path(str(item)).name for _, item in images]
        entries: dict[int, dict[str, Any]] = {}
        for j, (index, text) in enumerate(texts):
            layers, tokens = run.text[j], tokenizer.tokens(ids[j])
            is_causal = causal(layers)
            title = f"text tower: {'causal ' if is_causal else ''}self-attention"
            vectors = _stored(run.text_calls[j], layers, request.vectors, causal=is_causal)
            output = decoded_text(tokenizer, ids[j])
            entry = self_attention_entry(
                text, tokens, layers, name="text", title=title, causal=is_causal,
                vectors=vectors, output=output,
            )  # fmt: skip
            entry["similarity"] = similarity(
                text_title, image_names, run.logits[:, j], shares[:, j]
            )
            entries[index] = entry
        for i, (index, item) in enumerate(images):
            layers, (pixel_values, seen) = run.vision[i], prepared[i]
            vectors = _stored(run.vision_calls[i], layers, request.vectors, causal=False)
            entry = image_entry(
                model, item, pixel_values, seen, layers, vectors, name="vision", title=VISION_TITLE
            )
            entry["output"] = text_names[int(shares[i].argmax())]
            entry["similarity"] = similarity(image_title, text_names, run.logits[i], shares[i])
            entries[index] = entry
        return [entries[index] for index in range(len(inputs))]


ADAPTERS[TransformersDualEncoder.family] = DualEncoderAdapter()
register_explorer(TransformersDualEncoder.__name__, ADAPTERS[TransformersDualEncoder.family])
