"""``explore(model, inputs)``: a model's attention on some inputs as one JSON-able dict, the
data of the explorer page (its schema is documented in docs/explorer.md).

What a page holds for each model family is its adapter's (``qkv.explore.registry``): the
translators and the captioner in ``decoders``, the classifiers in ``classifiers``, the
language models in ``language``, folders read by transformers in ``transformers_folders``
and ``dual_encoders``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from qkv.errors import InputError

from . import (  # noqa: F401  (register adapters)
    classifiers,
    decoders,
    dual_encoders,
    language,
    pretrained,
    transformers_folders,
)
from .registry import ExploreRequest, explorer_for
from .summaries import WEIGHT_SCALE

__all__ = ["explore", "FORMAT", "VERSION"]

FORMAT, VERSION = "qkv-explorer", 1


@torch.no_grad()
def explore(
    model: nn.Module,
    inputs: Sequence[str | Sequence[int] | Tensor],
    *,
    tokenizer: Any = None,
    classes: Sequence[str] | None = None,
    beam: int = 1,
    length_penalty: float = 1.0,
    max_len: int | None = None,
    names: Sequence[str] | None = None,
    labels: Sequence[Any] | None = None,
    generate: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    eos_ids: Sequence[int] = (),
    vectors: str | Sequence[int] | None = None,
    targets: Sequence[str] | None = None,
    architecture: str | None = None,
) -> dict[str, Any]:
    """Decode each input and gather the attention the explorer page shows, as plain data.

    model: a Transformer, an RNNTranslator, a Captioner, a classifier (image-classifier,
        clip-classifier, frame-tagger) or a DecoderLM; models without attention weights
        are refused.
    inputs: source sentences (str, or lists of token ids) for a translator; images
        (3, H, W) floats in [0, 1] for a captioner; pictures (C, S, S) for an image
        classifier; clips (T, C, S, S) for a clip classifier or a frame tagger; prompts
        (str, or lists of token ids) for a language model; texts and image files together
        for a dual encoder read via transformers (CLIP, SigLIP: every image against every
        text, one page entry per input; ``qkv.explore.dual_encoders``).
    tokenizer: the translator's tokenizer (``encode``/``tokens``) or the captioner's word
        vocabulary, to label the tokens.
    classes: a classifier's class names (a list of str given as ``tokenizer`` is read as
        the class names too, as before ``classes`` existed).
    beam: 1 decodes greedily; above 1 a Transformer shows the best beam hypothesis and an
        RNN or captioner shows the greedy one beside every beam hypothesis.
    max_len: the most tokens to generate (default: 1.5 x the source + 10 for translators,
        the config's max_len - 1 for captioners).
    names: a label per input for the page's list (default: the sentence, or "image N").
    labels: classifiers only: per input the true class id (a frame tagger: one per frame),
        or None where unknown; beam, length_penalty and max_len do not apply to them.
    generate: language models only: the tokens to sample after each prompt (0: the
        prompt alone), with ``temperature`` (0 = greedy), ``top_k`` and ``seed`` as in
        :func:`qkv.decoding.sample`, stopping at an end token of ``eos_ids`` (a pretrained
        folder's ``eos_token_id``).
    vectors: language models, encoders and Transformer translators: the layers whose
        queries, keys and values the page stores for its neuron view ("all", or layer
        indices; default none), in every attention of the layer.
    targets: encoder-decoder folders read via transformers: per input the text the decoder
        reads (teacher-forced) instead of its greedy or beam output.
    architecture: the model's name in the page's header and facts (a pretrained folder's
        architecture, ``load_folder(...).name``: "GPT-2", "BERT", ...; default: the
        adapter's, else the kind's own word).

    Render the result with :func:`qkv.explore.render_html`.
    """
    model_type, adapter = explorer_for(model)
    if isinstance(inputs, (str, Tensor)) and not (isinstance(inputs, Tensor) and inputs.dim() == 4):
        raise InputError("explore takes a list of inputs, not one input")
    inputs = list(inputs)
    if not inputs:
        raise InputError("explore needs at least one input")
    if names is not None and len(names) != len(inputs):
        raise InputError(f"{len(names)} names for {len(inputs)} inputs")
    if labels is not None and not adapter.takes_labels:
        raise InputError(f"labels are for classifiers; a {model_type!r} model has none")
    if generate and not adapter.generates:
        raise InputError(f"generate is for language models; a {model_type!r} model decodes")
    if vectors is not None and not adapter.vectors:
        raise InputError(
            "vectors (the neuron view) are for language models, encoders and Transformer "
            f"translators, not {model_type!r}"
        )
    if targets is not None and not adapter.takes_targets:
        raise InputError(
            "targets (a decoder text per input) are for encoder-decoder folders read via "
            f"transformers, not a {model_type!r} model"
        )
    if targets is not None and (
        len(targets) != len(inputs) or not all(isinstance(t, str) and t for t in targets)
    ):
        raise InputError(f"give one non-empty target text per input: {len(inputs)} inputs")
    if adapter.takes_labels and classes is None and _is_names(tokenizer):
        classes, tokenizer = list(tokenizer), None
    request = ExploreRequest(
        tokenizer=tokenizer,
        classes=classes,
        beam=beam,
        length_penalty=length_penalty,
        max_len=max_len,
        labels=labels,
        generate=generate,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        eos_ids=eos_ids,
        vectors=vectors,
        targets=None if targets is None else list(targets),
    )
    was_training = model.training
    model.eval()
    try:
        pages = adapter.pages(model, inputs, request)
    finally:
        model.train(was_training)
    if names is not None:
        for page, name in zip(pages, names, strict=True):
            page["name"] = str(name)
    facts = {"kind": adapter.kind, "class": type(model).__name__, **adapter.facts(model)}
    if architecture is not None:
        facts["architecture"] = architecture
    # what the page shows for the kind (registry.PageKind; register_explorer asked for it)
    facts["page"] = adapter.page.data(facts)
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": facts,
        "weight_scale": WEIGHT_SCALE,
        "inputs": pages,
    }


def _is_names(tokenizer: Any) -> bool:
    return isinstance(tokenizer, Sequence) and not isinstance(tokenizer, str)
