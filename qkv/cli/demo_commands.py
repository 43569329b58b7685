"""`qkv demo`: the main job on the built-in data, start to finish (translation or captioning)."""

from __future__ import annotations

import argparse

EXAMPLE = "\n\nexample:\n  "


def register(commands: argparse._SubParsersAction) -> None:
    raw = argparse.RawDescriptionHelpFormatter

    demo = commands.add_parser(
        "demo",
        help="train a small Transformer on generated dates and show its attention (~4 min on a CPU)",
        description="The main job on the built-in data: trains a small Transformer to turn "
        "human-written dates into ISO dates, prints translations and test exact-match "
        "accuracy, and writes cross-attention heatmaps (PNG)."
        + EXAMPLE
        + "qkv demo --out qkv-demo",
        formatter_class=raw,
    )
    demo.add_argument(
        "part",
        nargs="?",
        default="translation",
        choices=["translation", "captioning"],
        help="translation (default): dates -> ISO dates with a Transformer; "
        "captioning: a captioner on generated scenes",
    )
    demo.add_argument(
        "--out", help="folder for checkpoints and pictures (default: qkv-demo, qkv-demo-captioning)"
    )
    demo.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's choice for translation, 1 for captioning)",
    )
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    from ..tasks import demo_captioning, run_demo, use_threads
    from ..tasks.demo import DEMO_THREADS

    use_threads(args.threads if args.threads is not None else DEMO_THREADS[args.part])
    if args.part == "captioning":
        demo_captioning(args.out or "qkv-demo-captioning")
    else:
        run_demo(args.out or "qkv-demo")
    return 0
