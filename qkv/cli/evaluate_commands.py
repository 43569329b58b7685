"""`qkv evaluate`: score any trained checkpoint on a split, by what its task means."""

from __future__ import annotations

import argparse
import json

from ..data import SPLITS
from ..families import evaluate_checkpoint
from ..tasks.evaluate import EvaluationRequest
from .commands import add_checkpoint_options, add_command
from .options import setup_from

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    """Add `qkv evaluate`."""
    evaluate = add_command(
        commands,
        "evaluate",
        help="score a checkpoint on a split: BLEU (translators, captioners), accuracy "
        "(classifiers), perplexity (language models)",
        description="Score a checkpoint by what its task means: a translator's translations "
        "with sacreBLEU (BLEU, chrF, with their signatures) and exact match; a captioner's "
        "captions with BLEU-1..4 against all references (and attention grounding on the "
        "scenes); a classifier's accuracy; a language model's loss and perplexity per token.",
        examples="qkv evaluate --checkpoint qkv-demo --data dates --split test --json\n"
        "qkv evaluate --checkpoint runs/lm --split valid",
    )
    add_checkpoint_options(evaluate)
    evaluate.add_argument(
        "--data", help="corpus name or file(s) (default: the data the checkpoint trained on)"
    )
    evaluate.add_argument(
        "--split",
        choices=list(SPLITS),
        help="default: test (a language model's text: valid)",
    )
    evaluate.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    evaluate.add_argument("--limit", type=int, help="score only the first N items")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument(
        "--by-length",
        action="store_true",
        help="translators: also BLEU per source length in words (0-10, 11-20, 21-30, 31-40, "
        "41+); the JSON gains 'by_length'",
    )
    evaluate.add_argument("--images", help="captioners on a Karpathy JSON: the image folder")
    evaluate.set_defaults(run=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    evaluation = evaluate_checkpoint(args.checkpoint, setup_from(args, EvaluationRequest))
    print(json.dumps(dict(evaluation.scores)) if args.json else "\n".join(evaluation.lines))
    return 0
