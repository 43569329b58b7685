"""Scoring any trained checkpoint on a split of data, each family by what its task means:
BLEU / chrF for translators, BLEU-1..4 and grounding for captioners, accuracy for
classifiers, perplexity for language models (what `qkv evaluate` calls).

Each family registers one scorer by the checkpoint's model type (:data:`SCORERS`); a scorer
gives an :class:`Evaluation`: JSON-able scores and the lines that describe them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..decoding.search import check_search
from ..errors import CheckpointError, DataError, InputError
from ..training import checkpoint_model_type, load_checkpoint
from .translator import reading_errors

__all__ = ["EvaluationRequest", "Evaluation", "SCORERS", "evaluate_checkpoint"]


@dataclass(frozen=True)
class EvaluationRequest:
    """What to score.  data: a corpus, JSON, folder or text file (None: the data the
    checkpoint was trained on); split: None is "test" (a language model's text has no test
    split: "valid"); limit: only the first N items; images: a Karpathy JSON's picture folder;
    by_length: translators also give BLEU per source length."""

    data: str | None = None
    split: str | None = None
    beam: int = 4
    limit: int | None = None
    device: str = "cpu"
    images: str | None = None
    by_length: bool = False

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise InputError(
                f"limit={self.limit} must be a positive number of items", fields=("limit",)
            )
        check_search(self.beam)


@dataclass(frozen=True)
class Evaluation:
    """What a scorer found: ``scores`` (JSON-able) and ``lines`` that say them in words."""

    scores: dict[str, Any]
    lines: list[str] = field(default_factory=list)


def _trained_on(checkpoint: str | Path) -> str:
    with reading_errors(CheckpointError):
        setup = load_checkpoint(checkpoint, load_tokenizers=False).metadata.get("setup", {})
    return setup.get("data") if isinstance(setup, dict) else None


def _translation(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    from .translator import Translator, score_translator

    data, split = request.data or _trained_on(checkpoint), request.split or "test"
    translator = Translator.from_checkpoint(checkpoint, device=request.device)
    report = score_translator(
        translator,
        data,
        split=split,
        beam=request.beam,
        limit=request.limit,
        by_length=request.by_length,
    )
    scores = report.scores
    lines = [
        f"{data} {split} ({scores.num_sentences} sentences, beam {request.beam})",
        f"BLEU {scores.bleu:.2f}   chrF {scores.chrf:.2f}   exact match {scores.exact_match:.1%}",
        *(f"{name} signature: {signature}" for name, signature in scores.signature.items()),
    ]
    for bucket in report.by_length or []:
        bleu = "     -" if bucket.count == 0 else f"{bucket.bleu:6.2f}"  # no sentence, no score
        lines.append(f"  source {bucket.label:>6} words: BLEU {bleu}  ({bucket.count} sentences)")
    return Evaluation(report.as_dict(), lines)


def _captioning(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    from .captioner_eval import evaluate_captioning
    from .captioning import caption_examples
    from .image_captioner import ImageCaptioner

    with reading_errors(CheckpointError):
        captioner = ImageCaptioner.from_checkpoint(checkpoint, device=request.device)
    data, split = request.data or _trained_on(checkpoint), request.split or "test"
    with reading_errors(DataError):
        examples = caption_examples(
            data,
            split,
            image_size=captioner.image_size,
            images=request.images,
            size=request.limit,
        )
    scores, _ = evaluate_captioning(captioner, examples, beam=request.beam)
    lines = [
        f"{data} {split} ({scores.num_images} images, beam {request.beam})",
        f"BLEU-1 {scores.bleu1:.2f}   BLEU-2 {scores.bleu2:.2f}   BLEU-3 {scores.bleu3:.2f}   "
        f"BLEU-4 {scores.bleu4:.2f}   exact match {scores.exact_match:.1%}",
        "BLEU: corpus-level, against all references of each image; captions are lowercase "
        "words joined by spaces, sacreBLEU tokenize='none'",
    ]
    if scores.grounding is not None:
        lines.append(
            f"grounding: {scores.grounding:.1%} of each object word's attention falls on its "
            f"object; a uniform map gives {scores.grounding_uniform:.1%} "
            f"({scores.grounded_words} words)"
        )
    return Evaluation(scores.as_dict(), lines)


def _classification(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    import dataclasses

    from .classifier import classification_data, evaluate_classifier, load_classifier

    model, setup = load_classifier(checkpoint, device=request.device)
    if request.data is not None and request.data != setup.data:
        setup = dataclasses.replace(setup, data=request.data)
    split = request.split or "test"
    scores = evaluate_classifier(model, classification_data(setup, split, request.limit))
    return Evaluation(
        scores.as_dict(), [f"{setup.data} {split}", *describe_classifier_scores(scores)]
    )


def describe_classifier_scores(scores) -> list[str]:
    """A classifier's scores in words (``ClassifierScores``)."""
    lines = [f"accuracy: {scores.accuracy:.2%} of {scores.count}"]
    if scores.occluded_accuracy is not None:
        lines.append(
            f"occluded frames: {scores.occluded_accuracy:.2%}, clear frames: "
            f"{scores.clear_accuracy:.2%}"
        )
    if scores.marked_weight is not None:
        lines.append(
            f"attention on the marked frame: {scores.marked_weight:.1%} "
            f"(uniform: {scores.uniform_weight:.1%})"
        )
    return lines


def _lm(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    from ..data.text import load_text
    from .lm import context_loss, encode_text, load_lm

    lm = load_lm(checkpoint, device=request.device)
    data = request.data or (lm.setup.data if lm.setup is not None else None)
    split = request.split or "valid"
    if split not in ("train", "valid"):
        raise InputError(
            f"split={split!r}: a language model's text has train and valid splits",
            fields=("split",),
        )
    with reading_errors(DataError):
        text = getattr(load_text(data), split)
    ids = encode_text(lm.tokenizer, text)
    # the run's training window (a fine-tuned folder's model reads far more positions)
    context = lm.setup.context_length if lm.setup is not None else lm.model.config.max_len
    windows = None if request.limit is None else request.limit * context + 1
    loss = context_loss(lm.model, ids[:windows], context=context)
    scores = {"loss": loss, "perplexity": math.exp(loss), "tokens": int(ids[:windows].numel())}
    lines = [
        f"{data} {split} ({scores['tokens']} tokens, windows of {context})",
        f"loss {loss:.4f} nats per token   perplexity {scores['perplexity']:.2f}",
    ]
    return Evaluation(scores, lines)


#: model type -> the scorer of its family.
SCORERS: dict[str, Callable[[str | Path, EvaluationRequest], Evaluation]] = {
    "transformer": _translation,
    "rnn-attention": _translation,
    "rnn": _translation,
    "captioner": _captioning,
    "image-classifier": _classification,
    "clip-classifier": _classification,
    "frame-tagger": _classification,
    "lm": _lm,
}


def evaluate_checkpoint(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """Score ``checkpoint`` (a run folder: its best checkpoint; or a step folder)."""
    with reading_errors(CheckpointError):
        model_type = checkpoint_model_type(checkpoint)
    if model_type not in SCORERS:
        raise CheckpointError(
            f"{checkpoint} holds a {model_type!r} model, which has no scorer; scored are "
            f"{', '.join(SCORERS)}"
        )
    return SCORERS[model_type](checkpoint, request)
