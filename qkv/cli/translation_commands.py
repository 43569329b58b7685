"""Subcommands for translation: train translation, translate."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..tasks.presets import PRESETS, SMALL_DATA_TRANSFORMER, sizes_of
from ..tasks.translation import TranslationSetup
from .commands import add_command, add_device_option, report_run, train_task_from_args
from .options import add_task_options

_SMALL = SMALL_DATA_TRANSFORMER
_SIZES = "; ".join(
    f"{size}: {PRESETS[('transformer', size)].summary}" for size in sizes_of("transformer")
)
_VOCAB = ", ".join(
    f"{size} {PRESETS[('transformer', size)].vocab_size}" for size in sizes_of("transformer")
)

#: TranslationSetup field -> help of its option.
SETUP_HELP = {
    "model": "model type",
    "data": "corpus name or file(s)",
    "valid": "validation file, when --data is a single file",
    "size": f"model size ({_SIZES}; see docs/results.md)",
    "dropout": "dropout, overriding the size's default",
    "attention_dropout": "Transformer only: dropout on the attention weights (default: the "
    f"size's: {_SMALL['attention_dropout']:g} for small-data, else --dropout)",
    "activation_dropout": "Transformer only: dropout on the feed-forward's hidden activations "
    f"(default: the size's: {_SMALL['activation_dropout']:g} for small-data, else --dropout)",
    "word_dropout": "Transformer only: in training, the probability that a whole input "
    f"token's embedding is zeroed (default: the size's: {_SMALL['word_dropout']:g} for "
    "small-data, else 0)",
    "score": "RNN attention score (additive is Bahdanau's)",
    "tokenizer": "auto: char for dates, BPE otherwise",
    "vocab_size": f"BPE vocabulary size (default: the size's: {_VOCAB})",
    "max_len": "longest sentence in tokens; longer ones are truncated with a warning",
    "max_words": "drop training pairs whose source has more words",
    "valid_bleu_sentences": "validation sentences decoded (greedy) for BLEU",
}


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train translation` (to ``tasks``, the subcommands of `qkv train`), `qkv
    translate`."""
    translation = add_command(
        tasks,
        "translation",
        help="train a translator (Transformer, RNN with attention, RNN baseline)",
        description="Train a translator on a built-in corpus (dates, ding-de-en, bible-en-es) or "
        "your own files (x.tsv of source<TAB>target lines, or src.txt,tgt.txt; '{split}' in a "
        "path is replaced by train/valid/test). Checkpoints, the tokenizer and log.jsonl go to "
        "--out; --resume continues an interrupted run exactly.",
        examples="qkv train translation --model transformer --data ding-de-en --out runs/de-en "
        "--max-minutes 30\nqkv train translation --model rnn-attention --score general --data "
        "dates --out runs/rnn",
    )
    translation.add_argument(
        "--out", required=True, help="run folder (checkpoints, tokenizer, log.jsonl)"
    )
    presets = {
        f"{family} {size}": PRESETS[(family, size)]
        for family in ("transformer", "rnn")
        for size in sizes_of(family)
    }
    add_task_options(translation, TranslationSetup, {None: SETUP_HELP}, presets)
    translation.set_defaults(run=_train_translation)

    translate = add_command(
        commands,
        "translate",
        help="translate sentences with a trained checkpoint",
        description="Translate sentences given as arguments, or one per line on stdin.",
        examples='qkv translate --checkpoint qkv-demo "the 3rd of March 1998" "3/3/98"\necho '
        '"Das ist gut." | qkv translate --checkpoint runs/de-en --beam 4',
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
    add_device_option(translate)
    translate.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: read stdin)"
    )
    translate.set_defaults(run=_translate)


def _train_translation(args: argparse.Namespace) -> int:
    from ..tasks.translation import TRANSLATION

    return report_run(train_task_from_args(TRANSLATION, TranslationSetup, args), args.out)


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
