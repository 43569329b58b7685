"""``qkv``: train, decode, score and look at attention models from the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import captioning_commands, curve_commands, lm_commands, translation_commands

__all__ = ["main", "build_parser"]

DESCRIPTION = """\
qkv: attention, from softmax(QK^T / sqrt(d)) V to models whose attention you can see.

Start with `qkv demo`: it trains a small Transformer on generated dates in a few minutes
on a CPU and writes attention heatmaps.  Every command has --help with an example."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qkv", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    translation_commands.register(commands)
    captioning_commands.register(commands)
    curve_commands.register(commands)
    lm_commands.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("qkv: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, OSError, RuntimeError) as error:
        # Library errors name the problem and the fix; show that line, not a traceback.
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"qkv: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
