"""Subcommands for captioning: `train captioning` and `caption`.

Hooks for ``qkv.cli.main``: :func:`add_train_parser` (under `qkv train`) and :func:`register`
(`qkv caption`).
"""

from __future__ import annotations

import argparse

from ..tasks.captioning import CaptioningSetup
from ..tasks.presets import preset_for
from .commands import add_checkpoint_options, add_command, report_run, train_task_from_args
from .options import add_task_options, call_with_options

__all__ = ["add_train_parser", "register"]

#: CaptioningSetup field -> help of its option, by group.
SETUP_HELP = {
    "data": {
        "data": "'shapes' (the generated scenes) or a Karpathy JSON file",
        "images": "folder of the JSON's pictures (default: the JSON's folder)",
        "image_size": "images are resized to this side",
        "min_count": "rarer words become <unk>",
        "max_caption_len": "words per caption",
        "train_size": "use only the first N training images",
        "valid_size": "validation images for the loss and greedy BLEU-4",
    },
    "model": {
        "score": "attention score (additive is the paper's)",
        "attention": "the baseline: the decoder sees the mean region feature at every word",
        "doubly_stochastic": "weight of the doubly stochastic regulariser (0 = off; default: 0 "
        "on the scenes, where 0.1 halved the attention on the named object in 3 seeds of 3 "
        "minutes; 0.1 on a Karpathy JSON; the paper's 1)",
        "gate": "drop the gating scalar beta_t",
        "encoder": "resnet-small (trained from scratch) or torchvision:<name>, e.g. "
        "torchvision:resnet18",
        "pretrained_encoder": "ImageNet weights for torchvision",
        "encoder_from": "start the CNN from a classifier checkpoint (`qkv train classifier`): "
        "its weights load exactly, and its encoder, --image-size, --feature-dim and --grid "
        "replace the captioner's (giving other values than the classifier's is an error)",
        "freeze_encoder": "do not train the CNN (with --encoder-from or --pretrained-encoder): "
        "each training image's region features are computed once and cached in memory "
        "(float32, up to 2 GiB, checked at the start), so a step costs the decoder's time only",
        "grid": "regions per side",
        "feature_dim": "region feature width",
        "embedding_dim": "word embedding width",
        "hidden_dim": "LSTM width",
        "attention_dim": "additive score width",
        "dropout": "dropout before the output layer",
    },
}


def add_train_parser(tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train captioning` to the `qkv train` task parsers."""
    captioning = add_command(
        tasks,
        "captioning",
        help="train an image captioner (Show, Attend and Tell) on scenes or a Karpathy JSON",
        description="Train a captioner whose decoder attends over image regions at every word. "
        "--data shapes draws the generated scenes (no download); a JSON path reads a Karpathy "
        "split file (Flickr8k/30k, COCO) with its pictures under --images. Checkpoints, the "
        "word vocabulary and log.jsonl go to --out; validation logs BLEU-4 (0-100), exact "
        "match and, on the scenes, attention grounding. --max-tokens counts an image as its "
        "regions: 4096 makes batches of 64 images with the 8 x 8 grid.",
        examples="qkv train captioning --data shapes --out runs/shapes --max-minutes 20\n"
        "qkv train captioning --data dataset_flickr8k.json --images Flicker8k_Dataset "
        "--image-size 128 --out runs/flickr8k",
    )
    captioning.add_argument(
        "--out", required=True, help="run folder (checkpoints, vocab, log.jsonl)"
    )
    presets = {"captioning": preset_for("captioner", "default")}
    flags = {"doubly_stochastic": "--lambda"}
    add_task_options(captioning, CaptioningSetup, SETUP_HELP, presets, flags=flags)
    captioning.set_defaults(run=_train_captioning)


def register(commands: argparse._SubParsersAction, tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train captioning` (to ``tasks``, the subcommands of `qkv train`) and `qkv
    caption`."""
    add_train_parser(tasks)
    caption = add_command(
        commands,
        "caption",
        help="caption images with a trained captioner, optionally with attention strips (PNG)",
        description="Caption picture files (any size or mode: converted to RGB, resized and "
        "centre-cropped as in training). With --attention-out, writes per image a strip of "
        "the image and one panel per generated word with its attention overlaid; several "
        "images write FILE-0.png, FILE-1.png, ... in the order given.",
        examples="qkv caption --checkpoint runs/shapes scene.png --attention-out scene-attention.png",
    )
    add_checkpoint_options(caption)
    caption.add_argument("images", nargs="+", metavar="IMAGE", help="picture files")
    caption.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy, default)")
    caption.add_argument(
        "--length-penalty", type=float, default=1.0, help="GNMT length penalty for beam search"
    )
    caption.add_argument("--attention-out", help="PNG file for the attention strip(s)")
    caption.set_defaults(run=_caption)


def _train_captioning(args: argparse.Namespace) -> int:
    from ..tasks.captioning import CAPTIONING

    return report_run(train_task_from_args(CAPTIONING, CaptioningSetup, args), args.out)


def _caption(args: argparse.Namespace) -> int:
    from ..tasks.caption_files import caption_files

    captioned = call_with_options(caption_files, args, args.checkpoint, args.images)
    for item in captioned:
        print(f"{item.file}: {item.caption.text}")
    for item in captioned:
        if item.strip is not None:
            print(f"attention: {item.strip}")
    return 0
