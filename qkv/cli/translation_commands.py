"""`qkv translate`: sentences through a trained translator."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from .commands import add_command, add_device_option


def register(commands: argparse._SubParsersAction) -> None:
    """Add `qkv translate` (`qkv train translation` is the family's: ``train_commands``)."""
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
