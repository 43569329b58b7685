"""Subcommands for translation: train translation, translate, evaluate."""

from __future__ import annotations

import argparse
import json
import sys

from ..data import SPLITS
from ..errors import CheckpointError, InputError
from ..layers import available_scores
from ..tasks.translation import MODEL_BUILDERS, SIZES, TranslationSetup
from ..tasks.translation_models import (
    DEFAULT_VOCAB_SIZE,
    SMALL_DATA_TRANSFORMER,
    SMALL_DATA_VOCAB_SIZE,
)
from .options import add_train_options, run_training

#: Defaults of `qkv train translation`: the library's own.
SETUP = TranslationSetup()

EXAMPLE = "\n\nexample:\n  "

#: The Transformer's dropout sites besides --dropout (the RNNs have none of them).
_SMALL = SMALL_DATA_TRANSFORMER
DROPOUT_SITES = {
    "--attention-dropout": "dropout on the attention weights (default: the size's: "
    f"{_SMALL['attention_dropout']:g} for small-data, else --dropout)",
    "--activation-dropout": "dropout on the feed-forward's hidden activations (default: the "
    f"size's: {_SMALL['activation_dropout']:g} for small-data, else --dropout)",
    "--word-dropout": "in training, the probability that a whole input token's embedding is "
    f"zeroed (default: the size's: {_SMALL['word_dropout']:g} for small-data, else 0)",
}


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train translation` (to ``tasks``, the subcommands of `qkv train`), `qkv
    translate` and `qkv evaluate`."""
    raw = argparse.RawDescriptionHelpFormatter

    translation = tasks.add_parser(
        "translation",
        help="train a translator (Transformer, RNN with attention, RNN baseline)",
        description="Train a translator on a built-in corpus (dates, ding-de-en, bible-en-es) or "
        "your own files (x.tsv of source<TAB>target lines, or src.txt,tgt.txt; '{split}' in a "
        "path is replaced by train/valid/test). Checkpoints, the tokenizer and log.jsonl go to "
        "--out; --resume continues an interrupted run exactly."
        + EXAMPLE
        + "qkv train translation --model transformer --data ding-de-en --out runs/de-en --max-minutes 30"
        + "\n  qkv train translation --model rnn-attention --score general --data dates --out runs/rnn",
        formatter_class=raw,
    )
    translation.add_argument(
        "--model",
        default=SETUP.model,
        choices=list(MODEL_BUILDERS),
        help=f"model type (default: {SETUP.model})",
    )
    translation.add_argument(
        "--data", default=SETUP.data, help=f"corpus name or file(s) (default: {SETUP.data})"
    )
    translation.add_argument("--valid", help="validation file, when --data is a single file")
    translation.add_argument(
        "--out", required=True, help="run folder (checkpoints, tokenizer, log.jsonl)"
    )
    translation.add_argument(
        "--size",
        default=SETUP.size,
        choices=list(SIZES),
        help=f"model size (default: {SETUP.size}; small: CPU-sized; medium: for corpora of ~10-100k "
        "sentence pairs, with dropout 0.3; small-data: low-resource recipes chosen on "
        f"ding-de-en's valid split ({SMALL_DATA_VOCAB_SIZE} BPE tokens, the plateau schedule, "
        "label smoothing 0.1; see docs/results.md); base: the paper's Transformer)",
    )
    translation.add_argument("--dropout", type=float, help="dropout, overriding the size's default")
    for flag, what in DROPOUT_SITES.items():
        translation.add_argument(flag, type=float, help=f"Transformer only: {what}")
    translation.add_argument(
        "--score",
        default=SETUP.score,
        choices=available_scores(),
        help=f"RNN attention score (default: {SETUP.score}; additive is Bahdanau's)",
    )
    translation.add_argument(
        "--tokenizer",
        default=SETUP.tokenizer,
        choices=["auto", "char", "bpe"],
        help="auto (default): char for dates, BPE otherwise",
    )
    translation.add_argument(
        "--vocab-size",
        type=int,
        help=f"BPE vocabulary size (default: {DEFAULT_VOCAB_SIZE}; {SMALL_DATA_VOCAB_SIZE} with "
        "--size small-data)",
    )
    translation.add_argument(
        "--max-len",
        type=int,
        default=SETUP.max_len,
        help=f"longest sentence in tokens (default: {SETUP.max_len}); longer ones are "
        "truncated with a warning",
    )
    translation.add_argument(
        "--max-words", type=int, help="drop training pairs whose source has more words"
    )
    add_train_options(translation)
    translation.set_defaults(run=_train_translation)

    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained checkpoint",
        description="Translate sentences given as arguments, or one per line on stdin."
        + EXAMPLE
        + 'qkv translate --checkpoint qkv-demo "the 3rd of March 1998" "3/3/98"\n  echo "Das ist gut." | qkv translate --checkpoint runs/de-en --beam 4',
        formatter_class=raw,
    )
    translate.add_argument(
        "--checkpoint", required=True, help="a run folder (its best checkpoint) or a step folder"
    )
    translate.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy, default)")
    translate.add_argument(
        "--length-penalty",
        type=float,
        default=1.0,
        help="GNMT length penalty alpha for beam search",
    )
    translate.add_argument("--device", default="cpu", help="cpu or cuda")
    translate.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: read stdin)"
    )
    translate.set_defaults(run=_translate)

    evaluate = commands.add_parser(
        "evaluate",
        help="score a checkpoint on a corpus split (BLEU, chrF, exact match)",
        description="Translate a split and score it with sacreBLEU (BLEU, chrF, with their signatures) and exact match."
        + EXAMPLE
        + "qkv evaluate --checkpoint qkv-demo --data dates --split test --json",
        formatter_class=raw,
    )
    evaluate.add_argument("--checkpoint", required=True, help="a run folder or a step folder")
    evaluate.add_argument("--data", required=True, help="corpus name or file(s)")
    evaluate.add_argument("--split", default="test", choices=list(SPLITS), help="default: test")
    evaluate.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    evaluate.add_argument("--limit", type=int, help="score only the first N sentences")
    evaluate.add_argument("--device", default="cpu", help="cpu or cuda")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument(
        "--by-length",
        action="store_true",
        help="also BLEU per source length in words (0-10, 11-20, 21-30, 31-40, 41+); "
        "the JSON gains 'by_length'",
    )
    evaluate.add_argument("--images", help="captioners on a Karpathy JSON: the image folder")
    evaluate.set_defaults(run=_evaluate)


def _train_translation(args: argparse.Namespace) -> int:
    from ..tasks import TranslationSetup, train_translation

    setup = TranslationSetup(
        data=args.data,
        valid=args.valid,
        model=args.model,
        size=args.size,
        dropout=args.dropout,
        attention_dropout=args.attention_dropout,
        activation_dropout=args.activation_dropout,
        word_dropout=args.word_dropout,
        score=args.score,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        max_len=args.max_len,
        max_words=args.max_words,
    )
    return run_training(train_translation, setup, args)


def _translate(args: argparse.Namespace) -> int:
    from ..tasks import Translator

    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not sentences:
        raise InputError("no sentences: pass them as arguments or on stdin")
    translator = Translator.from_checkpoint(args.checkpoint, device=args.device)
    for translation in translator.translate(
        sentences, beam=args.beam, length_penalty=args.length_penalty
    ):
        print(translation.text)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from ..tasks import reading_errors
    from ..training import checkpoint_model_type

    with reading_errors(CheckpointError):
        model_type = checkpoint_model_type(args.checkpoint)
    if model_type == "captioner":
        from .captioning_commands import evaluate_command

        return evaluate_command(args)
    from ..tasks import Translator, score_translator

    translator = Translator.from_checkpoint(args.checkpoint, device=args.device)
    report = score_translator(
        translator,
        args.data,
        split=args.split,
        beam=args.beam,
        limit=args.limit,
        by_length=args.by_length,
    )
    if args.json:
        print(json.dumps(report.as_dict()))
        return 0
    scores = report.scores
    print(f"{args.data} {args.split} ({scores.num_sentences} sentences, beam {args.beam})")
    print(f"BLEU {scores.bleu:.2f}   chrF {scores.chrf:.2f}   exact match {scores.exact_match:.1%}")
    for name, signature in scores.signature.items():
        print(f"{name} signature: {signature}")
    for bucket in report.by_length or []:
        bleu = "     -" if bucket.count == 0 else f"{bucket.bleu:6.2f}"  # no sentence, no score
        print(f"  source {bucket.label:>6} words: BLEU {bleu}  ({bucket.count} sentences)")
    return 0
