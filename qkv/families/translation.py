"""The translators: a Transformer, an RNN with attention and the RNN baseline without it
(`qkv train translation`, scored by BLEU and chrF, explored sentence by sentence)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..explore import explorer_of_type
from ..tasks.evaluate import Evaluation, EvaluationRequest, data_to_score
from ..tasks.presets import RNN_SIZES, TRANSFORMER_SIZES
from ..tasks.translation import TRANSLATION, TranslationSetup
from ..tasks.translator import TRANSLATION_MODELS, Translator, load_translator, score_translator
from .record import ExplorerPage, Family, TrainCommand, ViewRequest, explore_with, train_with_spec

__all__ = ["FAMILY"]


def score(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """BLEU, chrF and exact match of the translations (per source length on request)."""
    data, split = data_to_score(checkpoint, request), request.split or "test"
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


def view(checkpoint: str, inputs: Sequence[str], request: ViewRequest) -> ExplorerPage:
    """Each sentence translated, with every attention of the search."""
    translator = Translator.from_checkpoint(checkpoint, device=request.device)
    return explore_with(translator.loaded, inputs, request)


FAMILY = Family(
    name="translation",
    model_types=TRANSLATION_MODELS,
    setup=TranslationSetup,
    presets={
        **{f"transformer {size}": preset for size, preset in TRANSFORMER_SIZES.items()},
        **{f"rnn {size}": preset for size, preset in RNN_SIZES.items()},
    },
    spec=TRANSLATION,
    command=TrainCommand(
        help="train a translator (Transformer, RNN with attention, RNN baseline)",
        description="Train a translator on a built-in corpus (dates, ding-de-en, bible-en-es) "
        "or your own files (x.tsv of source<TAB>target lines, or src.txt,tgt.txt; '{split}' "
        "in a path is replaced by train/valid/test). Checkpoints, the tokenizer and log.jsonl "
        "go to --out; --resume continues an interrupted run exactly.",
        examples="qkv train translation --model transformer --data ding-de-en --out runs/de-en "
        "--max-minutes 30\nqkv train translation --model rnn-attention --score general --data "
        "dates --out runs/rnn",
        out_help="run folder (checkpoints, tokenizer, log.jsonl)",
    ),
    train=train_with_spec(TRANSLATION),
    score=score,
    explorers={name: explorer_of_type(name) for name in TRANSLATION_MODELS},
    view=view,
    loader=load_translator,
    commands={name: "qkv translate, qkv evaluate or qkv explore" for name in TRANSLATION_MODELS},
)
