"""A model read from disk and ready to use: the one shape every loader returns.

A qkv run (``qkv.tasks.lm.load_lm``, each family's ``loader``), a Hugging Face folder read
into qkv's layers (``qkv.pretrained.load_pretrained``) and a folder opened for the explorer
(``qkv.explore.load_folder``) all give a :class:`LoadedModel`; the runners that translate
or caption (``qkv.tasks.Translator``, ``qkv.tasks.ImageCaptioner``) hold one and add only
their own limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["LoadedModel"]


@dataclass(frozen=True, eq=False)  # two loads of one checkpoint are two models
class LoadedModel:
    """A loaded model, its tokenizer and what messages say of it.

    model: the network, in eval mode.
    tokenizer: what turns its inputs into ids and back: a qkv tokenizer, a folder's
        tokenizer, a captioner's word vocabulary, transformers' tokenizer; None for a model
        that reads no text (a classifier, a vision folder).
    name: how messages name it ("qkv lm", "GPT-2", "Llama", "BERT", transformers' class name).
    model_type: the checkpoint's model type (``"lm"``, ``"transformer"``, ...) or a Hugging
        Face folder's config.json ``model_type`` (``"gpt2"``, ``"bert"``, ...).
    source: where it was read from (the checkpoint or folder as given; "" when unknown).
    folder: True for a Hugging Face folder (its config.json sets the model's limits), False
        for a qkv checkpoint.
    eos_ids: a language model's end tokens: generation stops at them.  qkv's LMs learn from
        running text without one (a model fine-tuned from a folder keeps the folder's).
    setup: the run's setup as its loader reads it (a language model's ``LMSetup``, a
        classifier's ``ClassifierSetup``, a translator's or captioner's stored fields); None
        for a folder, or a run written without one.
    """

    model: nn.Module
    tokenizer: Any
    name: str
    model_type: str
    source: str = ""
    folder: bool = False
    eos_ids: tuple[int, ...] = ()
    setup: object = None

    def too_long(self, length: int) -> str:
        """What to do about a prompt of ``length`` tokens past the model's positions."""
        limit = getattr(self.model, "max_positions", None)
        if self.folder:
            return (
                f"the prompt has {length} tokens, but this {self.model_type} folder's model has "
                f"{limit} positions (config.json); shorten the prompt to at most {limit} tokens"
            )
        return (
            f"the prompt has {length} tokens, but this model learned only max_len={limit} "
            f"positions; shorten the prompt to at most {limit} tokens, or train a model whose "
            "positions extend past max_len (positions 'sinusoidal', 'rope' or 'alibi')"
        )
