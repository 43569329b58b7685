"""Subcommands for captioning: `train captioning`, `caption`, and `evaluate` of a captioner.

Hooks for ``qkv.cli.main``: :func:`add_train_parser` (under `qkv train`), :func:`register`
(`qkv caption`) and :func:`evaluate_command` (what `qkv evaluate` runs for a captioner).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import CheckpointError, DataError, InputError
from ..layers import available_scores
from ..tasks.captioning import CaptioningSetup
from ..tasks.captioning_recipe import CAPTIONING_TRAIN_DEFAULTS
from .options import add_train_options, run_training

__all__ = ["add_train_parser", "register", "evaluate_command", "attention_paths"]

EXAMPLE = "\n\nexample:\n  "

#: Defaults of `qkv train captioning`: the library's own.
SETUP = CaptioningSetup()
#: (option, CaptioningSetup field, what it sets) of the captioner's sizes
WIDTHS = [
    ("--grid", "grid", "regions per side"),
    ("--feature-dim", "feature_dim", "region feature width"),
    ("--embedding-dim", "embedding_dim", "word embedding width"),
    ("--hidden-dim", "hidden_dim", "LSTM width"),
    ("--attention-dim", "attention_dim", "additive score width"),
    ("--dropout", "dropout", "dropout before the output layer"),
]


def add_train_parser(tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train captioning` to the `qkv train` task parsers."""
    captioning = tasks.add_parser(
        "captioning",
        help="train an image captioner (Show, Attend and Tell) on scenes or a Karpathy JSON",
        description="Train a captioner whose decoder attends over image regions at every word. "
        "--data shapes draws the generated scenes (no download); a JSON path reads a Karpathy "
        "split file (Flickr8k/30k, COCO) with its pictures under --images. Checkpoints, the "
        "word vocabulary and log.jsonl go to --out; validation logs BLEU-4 (0-100), exact "
        "match and, on the scenes, attention grounding. --max-tokens counts an image as its "
        "regions: 4096 makes batches of 64 images with the 8 x 8 grid."
        + EXAMPLE
        + "qkv train captioning --data shapes --out runs/shapes --max-minutes 20"
        + "\n  qkv train captioning --data dataset_flickr8k.json --images Flicker8k_Dataset "
        "--image-size 128 --out runs/flickr8k",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = captioning.add_argument_group("data")
    data.add_argument(
        "--data", default=SETUP.data, help=f"{SETUP.data!r} (default) or a Karpathy JSON file"
    )
    data.add_argument("--images", help="folder of the JSON's pictures (default: the JSON's folder)")
    data.add_argument("--out", required=True, help="run folder (checkpoints, vocab, log.jsonl)")
    data.add_argument(
        "--image-size",
        type=int,
        default=SETUP.image_size,
        help=f"images are resized to this side (default: {SETUP.image_size})",
    )
    data.add_argument(
        "--min-count",
        type=int,
        default=SETUP.min_count,
        help=f"rarer words become <unk> (default: {SETUP.min_count})",
    )
    data.add_argument(
        "--max-caption-len",
        type=int,
        default=SETUP.max_caption_len,
        help=f"words per caption (default: {SETUP.max_caption_len})",
    )
    data.add_argument("--train-size", type=int, help="use only the first N training images")
    data.add_argument(
        "--valid-size",
        type=int,
        default=SETUP.valid_size,
        help=f"validation images for the loss and greedy BLEU-4 (default: {SETUP.valid_size})",
    )
    model = captioning.add_argument_group("model")
    model.add_argument(
        "--score",
        default=SETUP.score,
        choices=available_scores(),
        help=f"attention score (default: {SETUP.score}; additive is the paper's)",
    )
    model.add_argument(
        "--no-attention",
        action="store_true",
        help="the baseline: the decoder sees the mean region feature at every word",
    )
    model.add_argument(
        "--lambda",
        dest="doubly_stochastic",
        type=float,
        help="weight of the doubly stochastic regulariser (0 = off; default: 0 on the scenes, "
        "where 0.1 halved the attention on the named object in 3 seeds of 3 minutes; 0.1 on "
        "a Karpathy JSON; the paper's 1)",
    )
    model.add_argument("--no-gate", action="store_true", help="drop the gating scalar beta_t")
    model.add_argument(
        "--encoder",
        default=SETUP.encoder,
        help="resnet-small (trained from scratch) or torchvision:<name>, e.g. torchvision:resnet18",
    )
    model.add_argument(
        "--pretrained-encoder", action="store_true", help="ImageNet weights for torchvision"
    )
    model.add_argument(
        "--encoder-from",
        metavar="DIR",
        help="start the CNN from a classifier checkpoint (`qkv train classifier`): its "
        "weights load exactly, and its encoder, --image-size, --feature-dim and --grid "
        "replace the captioner's (giving other values than the classifier's is an error)",
    )
    model.add_argument(
        "--freeze-encoder",
        action="store_true",
        help="do not train the CNN (with --encoder-from or --pretrained-encoder): each "
        "training image's region features are computed once and cached in memory (float32, "
        "up to 2 GiB, checked at the start), so a step costs the decoder's time only",
    )
    for flag, field, what in WIDTHS:
        model.add_argument(
            flag,
            type=float if field == "dropout" else int,
            default=getattr(SETUP, field),
            help=f"{what} (default: {getattr(SETUP, field)})",
        )
    add_train_options(captioning)
    captioning.set_defaults(run=_train_captioning)
    _change_defaults(captioning, CAPTIONING_TRAIN_DEFAULTS)


def _change_defaults(parser: argparse.ArgumentParser, defaults: dict[str, object]) -> None:
    """Set the defaults of options that ``add_train_options`` added, and say so in their
    help (argparse has no public way to reach an added option's help text)."""
    parser.set_defaults(**defaults)
    for action in parser._actions:
        if action.dest in defaults:
            action.help = f"default for captioning: {defaults[action.dest]}"


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train captioning` (to ``tasks``, the subcommands of `qkv train`) and `qkv
    caption`."""
    add_train_parser(tasks)
    caption = commands.add_parser(
        "caption",
        help="caption images with a trained captioner, optionally with attention strips (PNG)",
        description="Caption picture files (any size or mode: converted to RGB, resized and "
        "centre-cropped as in training). With --attention-out, writes per image a strip of "
        "the image and one panel per generated word with its attention overlaid; several "
        "images write FILE-0.png, FILE-1.png, ... in the order given."
        + EXAMPLE
        + "qkv caption --checkpoint runs/shapes scene.png --attention-out scene-attention.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    caption.add_argument("--checkpoint", required=True, help="a run folder or a step folder")
    caption.add_argument("images", nargs="+", metavar="IMAGE", help="picture files")
    caption.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy, default)")
    caption.add_argument(
        "--length-penalty", type=float, default=1.0, help="GNMT length penalty for beam search"
    )
    caption.add_argument("--attention-out", help="PNG file for the attention strip(s)")
    caption.add_argument("--device", default="cpu", help="cpu or cuda")
    caption.set_defaults(run=_caption)


def attention_paths(path: str | Path, count: int) -> list[Path]:
    """Where the strips of ``count`` images go: ``path`` itself for one image, else
    ``<stem>-0.png``, ``<stem>-1.png``, ... beside it."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InputError(f"--attention-out {str(path)!r} must be a .png file")
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{index}{path.suffix}") for index in range(count)]


def _train_captioning(args: argparse.Namespace) -> int:
    from ..tasks.captioning_recipe import train_captioning_with_recipe

    setup = CaptioningSetup(
        data=args.data,
        images=args.images,
        image_size=args.image_size,
        min_count=args.min_count,
        max_caption_len=args.max_caption_len,
        train_size=args.train_size,
        valid_size=args.valid_size,
        score=args.score,
        attention=not args.no_attention,
        gate=not args.no_gate,
        doubly_stochastic=args.doubly_stochastic,
        encoder=args.encoder,
        pretrained_encoder=args.pretrained_encoder,
        grid=args.grid,
        feature_dim=args.feature_dim,
        embedding_dim=args.embedding_dim,
        hidden_dim=args.hidden_dim,
        attention_dim=args.attention_dim,
        dropout=args.dropout,
        encoder_from=args.encoder_from,
        freeze_encoder=args.freeze_encoder,
    )
    if setup.encoder_from is not None:
        from ..tasks.captioning_transfer import ENCODER_FIELDS, fit_setup_to_classifier

        setup = fit_setup_to_classifier(setup)
        taken = ", ".join(f"{name}={getattr(setup, name)}" for name in ENCODER_FIELDS)
        print(f"encoder from {setup.encoder_from}: {taken}")
    return run_training(train_captioning_with_recipe, setup, args)


def _caption(args: argparse.Namespace) -> int:
    from ..tasks import ImageCaptioner, plot_caption_attention, reading_errors

    paths = attention_paths(args.attention_out, len(args.images)) if args.attention_out else []
    with reading_errors(CheckpointError):
        captioner = ImageCaptioner.from_checkpoint(args.checkpoint, device=args.device)
    if paths and not captioner.has_attention:
        raise InputError(
            "this checkpoint is the no-attention baseline: it has no attention to plot; "
            "drop --attention-out"
        )
    with reading_errors(DataError):
        images = captioner.load_images(args.images)
    captions = captioner.caption(
        images, beam=args.beam, length_penalty=args.length_penalty, need_attention=bool(paths)
    )
    for file_name, caption in zip(args.images, captions, strict=True):
        print(f"{file_name}: {caption.text}")
    grid = captioner.model.config.grid
    for image, caption, path in zip(images, captions, paths, strict=False):
        print(f"attention: {plot_caption_attention(image, caption, path, grid=grid)}")
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    """`qkv evaluate` for a captioner checkpoint: BLEU-1..4 against all references, exact
    match, and attention grounding on the scenes.  Reads args.checkpoint, data, split,
    beam, limit, device, json and (when the parser has it) images."""
    from ..tasks import ImageCaptioner, caption_examples, evaluate_captioning, reading_errors

    with reading_errors(CheckpointError):
        captioner = ImageCaptioner.from_checkpoint(args.checkpoint, device=args.device)
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit} must be a positive number of images")
    with reading_errors(DataError):
        examples = caption_examples(
            args.data,
            args.split,
            image_size=captioner.image_size,
            images=getattr(args, "images", None),
            size=args.limit,
        )
    scores, _ = evaluate_captioning(captioner, examples, beam=args.beam)
    if args.json:
        print(json.dumps(scores.as_dict()))
        return 0
    print(f"{args.data} {args.split} ({scores.num_images} images, beam {args.beam})")
    print(
        f"BLEU-1 {scores.bleu1:.2f}   BLEU-2 {scores.bleu2:.2f}   BLEU-3 {scores.bleu3:.2f}   BLEU-4 {scores.bleu4:.2f}   exact match {scores.exact_match:.1%}"
    )
    print(
        "BLEU: corpus-level, against all references of each image; captions are lowercase "
        "words joined by spaces, sacreBLEU tokenize='none'"
    )
    if scores.grounding is not None:
        print(
            f"grounding: {scores.grounding:.1%} of each object word's attention falls on its "
            f"object; a uniform map gives {scores.grounding_uniform:.1%} "
            f"({scores.grounded_words} words)"
        )
    return 0
