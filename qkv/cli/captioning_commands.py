"""`qkv caption`: pictures through a trained captioner, with attention strips.

Hook for ``qkv.cli.main``: :func:`register`.
"""

from __future__ import annotations

import argparse

from .commands import add_checkpoint_options, add_command
from .options import call_with_options

__all__ = ["register"]


def register(commands: argparse._SubParsersAction) -> None:
    """Add `qkv caption` (`qkv train captioning` is the family's: ``train_commands``)."""
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


def _caption(args: argparse.Namespace) -> int:
    from ..tasks.caption_files import caption_files

    captioned = call_with_options(caption_files, args, args.checkpoint, args.images)
    for item in captioned:
        print(f"{item.file}: {item.caption.text}")
    for item in captioned:
        if item.strip is not None:
            print(f"attention: {item.strip}")
    return 0
