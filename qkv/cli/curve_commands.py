"""`qkv curves`: a training run's loss and BLEU curves as a picture."""

from __future__ import annotations

import argparse

EXAMPLE = "\n\nexample:\n  qkv curves --checkpoint runs/de-en --out de-en-curves.png"


def register(commands: argparse._SubParsersAction) -> None:
    curves = commands.add_parser(
        "curves",
        help="plot a run's training and validation curves (PNG) from its log.jsonl",
        description="Plot the training loss, validation loss and validation BLEU (when the "
        "run measured it) of any qkv run against the update step." + EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    curves.add_argument("--checkpoint", required=True, help="a run folder (or its log.jsonl)")
    curves.add_argument("--out", required=True, help="PNG file to write")
    curves.add_argument("--title", help="figure title (default: the run folder's name)")
    curves.set_defaults(run=_curves)


def _curves(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..plotting import plot_training_log

    run = Path(args.checkpoint)
    title = args.title or (run.name if run.is_dir() else run.parent.name)
    print(plot_training_log(run, args.out, title=title))
    return 0
