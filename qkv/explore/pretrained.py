"""Pretrained Hugging Face folders on the explorer: BERT through ``qkv.pretrained.load_bert``,
GPT-2 (and, where ``qkv.pretrained`` has ``load_llama``, Llama, Qwen2 and Mistral) through
their loaders' :class:`~qkv.models.LoadedModel`.  The attention is qkv's own, computed
by qkv's layers with the folder's weights.

- :func:`load_folder`: the folder's model and a :class:`FolderTokenizer` (token ids with the
  model's special tokens, a label per token), or one clear error: not a folder, no config,
  no weights, no tokenizer.  Every other architecture (or any, with ``via="transformers"``)
  is loaded by transformers itself with qkv's attention (``transformers_folders``).
- :class:`EncoderAdapter`: a BERT encoder's bidirectional self-attention on each text, every
  layer and head, mean and rollout.  A decoder-only LM is the language model's adapter.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from qkv import pretrained
from qkv.errors import CheckpointError, InputError, MissingFileError
from qkv.models.loaded import LoadedModel
from qkv.pretrained import FolderTokenizer

from .registry import ExplorerAdapter, ExploreRequest, register_explorer
from .vectors import stored_vectors
from .views import ENCODER_PAGE, decoded_text, model_device, self_attention_entry

__all__ = ["FolderTokenizer", "load_folder", "EncoderAdapter", "ARCHITECTURES"]

#: config.json's model_type -> (the loader's name in qkv.pretrained, the page's description).
ARCHITECTURES = {
    "bert": ("load_bert", "BERT"),
    "gpt2": ("load_gpt2", "GPT-2"),
    "llama": ("load_llama", "Llama"),
    "qwen2": ("load_llama", "Qwen2"),
    "mistral": ("load_llama", "Mistral"),
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


#: How a folder can be read: qkv's own re-implementation (the architectures above), or
#: transformers' model with qkv's attention (every architecture whose attention uses the
#: interface); None: qkv's where it has one.
VIA = ("qkv", "transformers")


def load_folder(
    path: str | Path, *, device: str | torch.device = "cpu", via: str | None = None
) -> LoadedModel:
    """Read a Hugging Face folder for the explorer (see the module's docstring): its model
    (eval mode), tokenizer and architecture ("BERT", ...) as its ``name``; a folder read via
    transformers has a ``TransformersFolder`` model, the folder's ``AutoTokenizer`` (None for
    a vision model) and transformers' class name."""
    if via not in (None, *VIA):
        raise InputError(f"via={via!r}: read a folder via one of {', '.join(VIA)}")
    folder = Path(path)
    if not folder.is_dir():
        raise MissingFileError(
            f"pretrained={str(folder)!r}: no such folder", fields=("pretrained",)
        )
    if not (folder / "config.json").is_file():
        raise MissingFileError(f"{folder} has no config.json: is it a Hugging Face model folder?")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{folder / 'config.json'} is not JSON ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if via == "transformers" or (via is None and model_type not in ARCHITECTURES):
        from .transformers_folders import load_transformers_folder

        return load_transformers_folder(folder, device=device, model_type=str(model_type or ""))
    known = ", ".join(f"{name} ({arch})" for name, (_, arch) in ARCHITECTURES.items())
    if model_type not in ARCHITECTURES:
        raise CheckpointError(
            f"{folder} holds a {model_type!r} model; qkv re-implements the architectures "
            f"{known} (read it via transformers instead)"
        )
    loader_name, architecture = ARCHITECTURES[model_type]
    loader = getattr(pretrained, loader_name, None)
    if loader is None:
        raise CheckpointError(
            f"{folder} holds a {architecture} model, and this qkv has no "
            f"qkv.pretrained.{loader_name} to read it"
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise MissingFileError(f"{folder} has no weights ({' or '.join(WEIGHT_FILES)})")
    encoder = model_type == "bert"
    # BERT's [CLS]/[SEP] and the Llama family's BOS are what the models were trained with (the
    # tokenizer file's post-processor says which); GPT-2 adds nothing
    specials = model_type != "gpt2"
    tokenizer = FolderTokenizer.from_folder(folder, add_special_tokens=specials)  # first
    if encoder:
        model, _ = loader(folder)
        model = model.to(device).eval()
        return LoadedModel(model, tokenizer, architecture, model_type, str(folder), folder=True)
    # the loader's LoadedModel with the explorer's tokenizer (which labels every token)
    return dataclasses.replace(loader(folder, device=device), tokenizer=tokenizer)


class EncoderAdapter(ExplorerAdapter):
    """A BERT encoder on texts; ``tokenizer`` a :class:`FolderTokenizer` (or anything with
    ``encode`` giving ids with [CLS] / [SEP], and ``tokens``)."""

    kind, views = "encoder", ("encoder",)
    page = ENCODER_PAGE
    vectors = True
    config_facts = {"layers": "num_layers", "heads": "num_heads", "positions": "max_len"}

    def attention_modules(self, model: nn.Module) -> list[nn.Module]:
        return [layer.self_attention for layer in model.encoder.layers]

    @torch.no_grad()
    def text_attention(self, model, tokenizer, text, index: int = 0):
        """The ids of one text, and per layer its (H, T, T) float32 self-attention."""
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"input {index}: an encoder takes texts (non-empty str)")
        ids, limit = tokenizer.encode(text), model.config.max_len
        if len(ids) > limit:
            raise InputError(
                f"input {index} has {len(ids)} tokens; the model's positions reach "
                f"{limit}: shorten it or split it"
            )
        output = model(torch.tensor([ids], device=model_device(model)), need_weights=True)
        return ids, [weights[0].float().cpu() for weights in output.attention]

    def pages(self, model, inputs, request: ExploreRequest) -> list[dict[str, Any]]:
        tokenizer = request.tokenizer
        pages = []
        modules = self.attention_modules(model)
        for index, text in enumerate(inputs):
            (ids, layers), vectors = stored_vectors(
                modules, request.vectors, self.text_attention, model, tokenizer, text, index
            )
            tokens = tokenizer.tokens(ids)
            output = decoded_text(tokenizer, ids)
            pages.append(self_attention_entry(text, tokens, layers, vectors=vectors, output=output))
        return pages


register_explorer("bert", EncoderAdapter())
