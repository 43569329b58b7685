"""``load_pretrained(DIR)``: any supported Hugging Face folder, chosen by config.json's model_type.

    bert                   -> BertModel, BertTokenizer     (load_bert)
    gpt2                   -> DecoderLM, GPT2Tokenizer     (load_gpt2)
    llama, qwen2, mistral  -> DecoderLM, FolderTokenizer   (load_llama)

each as one :class:`~qkv.models.LoadedModel` (eval mode, named for messages).

The folder must hold its weights and its tokenizer (``tokenizer.json``; BERT also reads
``vocab.txt``); an unsupported model_type, absent weights or an absent tokenizer is one
:class:`~qkv.errors.QkvError` naming what is supported.  Every family's weights then pass
one check (:func:`qkv.pretrained.files.load_checked`: names, shapes, dtypes, finite values)
and its tokenizer another (:func:`~qkv.pretrained.files.check_tokenizer`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from qkv.errors import CheckpointError, MissingFileError
from qkv.models.loaded import LoadedModel

from .bert import load_bert
from .files import read_config
from .gpt2 import load_gpt2
from .llama import LLAMA_FAMILIES, load_llama

__all__ = ["load_pretrained", "PRETRAINED_FAMILIES"]


def _bert(folder: Path, device: str | torch.device) -> LoadedModel:
    model, tokenizer = load_bert(folder)
    return LoadedModel(model.to(device).eval(), tokenizer, "BERT", "bert", str(folder), True)


def _gpt2(folder: Path, device: str | torch.device) -> LoadedModel:
    return load_gpt2(folder, device=device)


def _llama(folder: Path, device: str | torch.device) -> LoadedModel:
    return load_llama(folder, device=device)


#: model_type -> the loader of that family's folders.
PRETRAINED_FAMILIES: dict[str, Callable[[Path, str | torch.device], LoadedModel]] = {
    "bert": _bert,
    "gpt2": _gpt2,
    **{family: _llama for family in LLAMA_FAMILIES},
}
_WEIGHTS = {"bert": ("model.safetensors", "pytorch_model.bin")}
_TOKENIZERS = {"bert": ("tokenizer.json", "vocab.txt")}


def load_pretrained(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """The model of a Hugging Face folder in qkv's layers (eval mode) and its tokenizer.

    Reads config.json's ``model_type`` and dispatches: see :data:`PRETRAINED_FAMILIES`."""
    folder = Path(path)
    hf = read_config(folder)
    family = hf.get("model_type")
    supported = sorted(PRETRAINED_FAMILIES)
    if family not in PRETRAINED_FAMILIES:
        raise CheckpointError(
            f"{folder} holds a model_type={family!r} model; qkv reads the architectures {supported}"
        )
    weights = _WEIGHTS.get(family, ("model.safetensors", "model.safetensors.index.json"))
    if not any((folder / name).is_file() for name in weights):
        raise MissingFileError(
            f"{folder} has no weights: a {family} folder needs {' or '.join(weights)} "
            f"(qkv reads {supported})"
        )
    tokenizers = _TOKENIZERS.get(family, ("tokenizer.json",))
    if not any((folder / name).is_file() for name in tokenizers):
        raise MissingFileError(
            f"{folder} has no tokenizer: a {family} folder needs {' or '.join(tokenizers)} "
            f"(qkv reads {supported})"
        )
    return PRETRAINED_FAMILIES[family](folder, device)
