"""`qkv train classifier`: pictures or clips -> labels, on the captioner's CNN.

Hook for ``qkv.cli.main``: :func:`register` adds the task under `qkv train`."""

from __future__ import annotations

import argparse
import json

from ..tasks.classifier import ClassifierSetup
from ..tasks.presets import PRESETS, sizes_of
from .commands import add_checkpoint_options, add_command, report_run, train_from_args
from .options import add_task_options, call_with_options, setup_from

__all__ = ["register", "add_train_parser", "add_classify_parser"]

#: ClassifierSetup field -> help of its option, by group.
SETUP_HELP = {
    "data": {
        "data": "fashion-mnist, shapes, clips, or a folder of class subfolders",
        "task": "default: image for pictures, clip for --data clips",
        "image_size": "default: 28 (fashion-mnist, clips), 64",
        "train_size": "use only the first N training items",
        "valid_size": "validation items",
    },
    "model": {
        "pool": "clips: frames pooled by attention (default), mean or last (a GRU's final "
        "state); pictures: regions pooled by mean (default) or attention",
        "feature_attention": "SelfAttention2d over the CNN's last feature map (gate "
        "initialised at 0)",
        "feature_dim": "CNN width (default: 32 for clips, else 64)",
        "grid": "regions per side (default: 8 for 64-pixel pictures, else 7)",
        "tagger_layers": "per-frame: self-attention blocks",
        "positions": "per-frame: no position encodings",
        "dropout": "dropout",
    },
}


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train classifier` (to ``tasks``, the subcommands of `qkv train`) and `qkv
    classify`."""
    add_train_parser(tasks)
    add_classify_parser(commands)


def add_train_parser(tasks: argparse._SubParsersAction) -> None:
    parser = add_command(
        tasks,
        "classifier",
        help="train an image or clip classifier on the captioner's CNN",
        description="Train the captioner's CNN encoder with a pooling + linear head on "
        "pictures (fashion-mnist: Debian dataset-fashion-mnist; shapes: the one-object "
        "scenes, colour + shape; or a folder of class subfolders), or on generated clips of "
        "Fashion-MNIST frames: --task clip (one marked frame names the clip) pools the "
        "frames by --pool attention|mean|last; --task per-frame labels every frame through "
        "self-attention blocks over the frames (--tagger-layers 0: each frame alone). "
        "Prints the test accuracy of the best checkpoint; `qkv classify` scores and draws it later. --max-tokens counts frames "
        "(a picture is one).",
        examples="qkv train classifier --data fashion-mnist --out runs/fmnist --max-minutes 4 "
        "--threads 1\nqkv train classifier --data clips --task clip --pool attention --out "
        "runs/clips",
    )
    parser.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the test scores as JSON")
    presets = {size: PRESETS[("classifier", size)] for size in sizes_of("classifier")}
    add_task_options(parser, ClassifierSetup, SETUP_HELP, presets)
    parser.set_defaults(run=_train_classifier)


def _train_classifier(args: argparse.Namespace) -> int:
    from ..tasks.classifier_run import train_and_score_classifier
    from ..tasks.evaluate import describe_classifier_scores

    run = train_from_args(train_and_score_classifier, setup_from(args, ClassifierSetup), args)
    if args.json:
        print(json.dumps({"checkpoint": str(run.checkpoint), **run.scores.as_dict()}))
        return 0
    report_run(run.result, f"{run.checkpoint} ({run.parameters:,} parameters)")
    print("\n".join(describe_classifier_scores(run.scores)))
    return 0


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
    from ..tasks.evaluate import describe_classifier_scores

    scores, paths = call_with_options(classify_and_plot, args, args.checkpoint)
    print(
        json.dumps(scores.as_dict()) if args.json else "\n".join(describe_classifier_scores(scores))
    )
    for path in paths:
        print(f"attention: {path}")
    return 0
