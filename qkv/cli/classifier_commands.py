"""`qkv train classifier`: pictures or clips -> labels, on the captioner's CNN.

Hook for ``qkv.cli.main``: :func:`register` adds the task under `qkv train`."""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from .options import add_train_options, train_config_from

__all__ = ["register", "add_train_parser", "add_classify_parser"]

#: The trainer's defaults for classification (the other tasks keep their own).
#: --max-tokens and --epochs default to None here: they follow the data (default_budget).
TRAIN_DEFAULTS = dict(
    lr=2e-3, warmup_steps=100, label_smoothing=0.0, validate_every=250, max_tokens=None, epochs=None
)
_BUDGET_HELP = "default for classification: by the data (fashion-mnist 512 / 2 epochs; 64-px "
_BUDGET_HELP += "pictures 64 / 5 epochs; clips 512 frames / 1 epoch)"


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train classifier` (to ``tasks``, the subcommands of `qkv train`) and `qkv
    classify`."""
    add_train_parser(tasks)
    add_classify_parser(commands)


def add_train_parser(tasks: argparse._SubParsersAction) -> None:
    parser = tasks.add_parser(
        "classifier",
        help="train an image or clip classifier on the captioner's CNN",
        description="Train the captioner's CNN encoder with a pooling + linear head on "
        "pictures (fashion-mnist: Debian dataset-fashion-mnist; shapes: the one-object "
        "scenes, colour + shape; or a folder of class subfolders), or on generated clips of "
        "Fashion-MNIST frames: --task clip (one marked frame names the clip) pools the "
        "frames by --pool attention|mean|last; --task per-frame labels every frame through "
        "self-attention blocks over the frames (--tagger-layers 0: each frame alone). "
        "Prints the test accuracy of the best checkpoint; `qkv classify` scores and draws it later. --max-tokens counts frames "
        "(a picture is one)."
        "\n\nexample:\n  qkv train classifier --data fashion-mnist --out runs/fmnist "
        "--max-minutes 4 --threads 1"
        "\n  qkv train classifier --data clips --task clip --pool attention --out runs/clips",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        default="fashion-mnist",
        help="fashion-mnist (default), shapes, clips, or a folder of class subfolders",
    )
    data.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl)")
    data.add_argument(
        "--task",
        choices=["image", "clip", "per-frame"],
        help="default: image for pictures, clip for --data clips",
    )
    data.add_argument("--image-size", type=int, help="default: 28 (fashion-mnist, clips), 64")
    data.add_argument("--train-size", type=int, help="use only the first N training items")
    data.add_argument(
        "--valid-size", type=int, default=1000, help="validation items (default: 1000)"
    )
    model = parser.add_argument_group("model")
    model.add_argument(
        "--pool",
        choices=["attention", "mean", "last"],
        help="clips: frames pooled by attention (default), mean or last (a GRU's final "
        "state); pictures: regions pooled by mean (default) or attention",
    )
    model.add_argument(
        "--feature-attention",
        action="store_true",
        help="SelfAttention2d over the CNN's last feature map (gate initialised at 0)",
    )
    model.add_argument("--feature-dim", type=int, help="CNN width (default: 32 for clips, else 64)")
    model.add_argument(
        "--tagger-layers", type=int, default=2, help="per-frame: self-attention blocks (default 2)"
    )
    model.add_argument(
        "--no-positions", action="store_true", help="per-frame: no position encodings"
    )
    model.add_argument("--dropout", type=float, default=0.1, help="default: 0.1")
    model.add_argument("--json", action="store_true", help="print the test scores as JSON")
    add_train_options(parser)
    parser.set_defaults(run=_train_classifier, **TRAIN_DEFAULTS)
    for action in parser._actions:
        if action.dest in TRAIN_DEFAULTS:
            action.help = f"default for classification: {TRAIN_DEFAULTS[action.dest]}"
            if TRAIN_DEFAULTS[action.dest] is None:
                action.help = _BUDGET_HELP


def _train_classifier(args: argparse.Namespace) -> int:
    from ..tasks.classifier import (
        ClassifierSetup,
        classification_data,
        default_budget,
        evaluate_classifier,
        load_classifier,
        train_classifier,
    )

    setup = ClassifierSetup(
        data=args.data,
        task=args.task,
        pool=args.pool,
        feature_attention=args.feature_attention,
        image_size=args.image_size,
        train_size=args.train_size,
        valid_size=args.valid_size,
        feature_dim=args.feature_dim,
        tagger_layers=args.tagger_layers,
        positions=not args.no_positions,
        dropout=args.dropout,
    )
    for name, value in default_budget(setup).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    result = train_classifier(setup, train_config_from(args), args.out, resume=args.resume)
    print(
        f"done: {result.steps} steps, {result.epochs} epochs, {result.elapsed:.0f} s, "
        f"stopped by {result.stop_reason}"
    )
    best = result.best_checkpoint or result.last_checkpoint
    model, _ = load_classifier(best)
    scores = evaluate_classifier(model, classification_data(setup, "test"))
    if args.json:
        print(json.dumps({"checkpoint": str(best), **scores.as_dict()}))
        return 0
    parameters = sum(p.numel() for p in model.parameters())
    print(f"checkpoint: {best} ({parameters:,} parameters)")
    _print_scores(scores)
    return 0


def _print_scores(scores) -> None:
    print(f"accuracy: {scores.accuracy:.2%} of {scores.count}")
    if scores.occluded_accuracy is not None:
        print(
            f"occluded frames: {scores.occluded_accuracy:.2%}, clear frames: "
            f"{scores.clear_accuracy:.2%}"
        )
    if scores.marked_weight is not None:
        print(
            f"attention on the marked frame: {scores.marked_weight:.1%} "
            f"(uniform: {scores.uniform_weight:.1%})"
        )


def add_classify_parser(commands: argparse._SubParsersAction) -> None:
    """Add `qkv classify`: score a trained classifier and draw its attention."""
    classify = commands.add_parser(
        "classify",
        help="score a trained classifier on a split and draw its attention (PNG)",
        description="Accuracy of a `qkv train classifier` checkpoint on a split of the data it "
        "was trained on (per-frame clips: also on the occluded frames; clips pooled by "
        "attention: the weight on the marked frame). --attention-out draws the attention "
        "pooling weights over the frames of the first --count clips, or the feature-map "
        "self-attention of a few query positions over --count pictures."
        "\n\nexample:\n  qkv classify --checkpoint runs/clips --attention-out clips.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    classify.add_argument("--checkpoint", required=True, help="a run folder or a step folder")
    classify.add_argument("--split", default="test", choices=["train", "valid", "test"])
    classify.add_argument("--limit", type=int, help="score only the first N items")
    classify.add_argument("--attention-out", help="PNG file for the attention figure")
    classify.add_argument("--count", type=int, default=4, help="items to draw (default: 4)")
    classify.add_argument("--json", action="store_true", help="print the scores as JSON")
    classify.add_argument("--device", default="cpu", help="cpu or cuda")
    classify.set_defaults(run=_classify)


def _classify(args: argparse.Namespace) -> int:
    from ..tasks.classifier import classification_data, evaluate_classifier, load_classifier
    from ..tasks.classifier_plots import plot_classifier_attention

    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit} must be a positive number of items")
    model, setup = load_classifier(args.checkpoint, device=args.device)
    data = classification_data(setup, args.split, args.limit)
    scores = evaluate_classifier(model, data)
    if args.json:
        print(json.dumps(scores.as_dict()))
    else:
        _print_scores(scores)
    if args.attention_out:
        for path in plot_classifier_attention(model, data, args.attention_out, count=args.count):
            print(f"attention: {path}")
    return 0
