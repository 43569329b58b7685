"""`qkv classify`: a trained classifier's scores and attention figure.

Hook for ``qkv.cli.main``: :func:`register`."""

from __future__ import annotations

import argparse
import json

from .commands import add_checkpoint_options, add_command
from .options import call_with_options

__all__ = ["register", "add_classify_parser"]


def register(commands: argparse._SubParsersAction) -> None:
    """Add `qkv classify` (`qkv train classifier` is the family's: ``train_commands``)."""
    add_classify_parser(commands)


def add_classify_parser(commands: argparse._SubParsersAction) -> None:
    """Add `qkv classify`: score a trained classifier and draw its attention."""
    classify = add_command(
        commands,
        "classify",
        help="score a trained classifier on a split and draw its attention (PNG)",
        description="Accuracy of a `qkv train classifier` checkpoint on a split of the data it "
        "was trained on (per-frame clips: also on the occluded frames; clips pooled by "
        "attention: the weight on the marked frame). --attention-out draws the attention "
        "pooling weights over the frames of the first --count clips, or the feature-map "
        "self-attention of a few query positions over --count pictures.",
        examples="qkv classify --checkpoint runs/clips --attention-out clips.png",
    )
    add_checkpoint_options(classify)
    classify.add_argument("--split", default="test", choices=["train", "valid", "test"])
    classify.add_argument("--limit", type=int, help="score only the first N items")
    classify.add_argument("--attention-out", help="PNG file for the attention figure")
    classify.add_argument("--count", type=int, default=4, help="items to draw (default: 4)")
    classify.add_argument("--json", action="store_true", help="print the scores as JSON")
    classify.set_defaults(run=_classify)


def _classify(args: argparse.Namespace) -> int:
    from ..tasks.classifier_plots import classify_and_plot
    from ..tasks.classifier_run import describe_classifier_scores

    scores, paths = call_with_options(classify_and_plot, args, args.checkpoint)
    print(
        json.dumps(scores.as_dict()) if args.json else "\n".join(describe_classifier_scores(scores))
    )
    for path in paths:
        print(f"attention: {path}")
    return 0
