"""The language model `qkv generate` samples from: a qkv run, or a Hugging Face folder.

``load_generator(checkpoint=runs/lm)`` reads a model trained by `qkv train lm`;
``load_generator(pretrained=DIR)`` a GPT-2, Llama, Qwen2 or Mistral folder
(:func:`qkv.pretrained.load_pretrained`).  Both give a :class:`~qkv.models.LoadedModel`
that :func:`qkv.tasks.lm.generate_text` drives the same way.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import InputError
from ..models import DecoderLM, LoadedModel
from ..pretrained import load_pretrained
from .lm import load_lm

__all__ = ["load_generator", "load_pretrained_lm"]


def load_pretrained_lm(path: str | Path, *, device: str | torch.device = "cpu") -> LoadedModel:
    """A Hugging Face language-model folder (gpt2, llama, qwen2, mistral) with its tokenizer;
    an encoder folder (bert) is refused: it has no next-token head to generate with."""
    loaded = load_pretrained(path, device=device)
    if not isinstance(loaded.model, DecoderLM):
        raise InputError(
            f"{path} holds a {loaded.model_type} encoder, which cannot generate text; "
            "generation reads gpt2, llama, qwen2 and mistral folders"
        )
    return loaded


def load_generator(
    *,
    checkpoint: str | Path | None = None,
    pretrained: str | Path | None = None,
    device: str | torch.device = "cpu",
) -> LoadedModel:
    """The model of exactly one of ``checkpoint`` (a qkv run or step folder) and
    ``pretrained`` (a Hugging Face folder)."""
    if (checkpoint is None) == (pretrained is None):
        raise InputError(
            "give exactly one model: checkpoint (a run of `qkv train lm`) or pretrained "
            "(a Hugging Face gpt2, llama, qwen2 or mistral folder)",
            fields=("checkpoint", "pretrained"),
        )
    if checkpoint is not None:
        return load_lm(checkpoint, device=device)
    return load_pretrained_lm(pretrained, device=device)
