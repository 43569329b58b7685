"""``qkv``: train, decode, score and look at attention models from the command line."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ..errors import NotFiniteError, QkvError
from ..training.devices import parse_device
from . import (
    attention_commands,
    captioning_commands,
    classifier_commands,
    curve_commands,
    demo_commands,
    evaluate_commands,
    explore_commands,
    lm_commands,
    train_commands,
    translation_commands,
)
from .options import flags_of

__all__ = ["main", "build_parser", "exit_code_for"]

DESCRIPTION = """\
qkv: attention, from softmax(QK^T / sqrt(d)) V to models whose attention you can see.

Start with `qkv demo`: it trains a small Transformer on generated dates in a few minutes
on a CPU and writes attention heatmaps.  Every command has --help with an example.

Exit status: 0 done; 2 a mistake in what qkv was given (one line says which, and the
fix); 1 a bug in qkv (with its traceback); 130 / 143 interrupted (Ctrl-C / SIGTERM)."""

#: Errors about the user's files and disk: a mistake to name in one line, not a bug.
USER_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)

BUG_LINE = "qkv: this is a bug in qkv, please report it with the traceback below"


class Parser(argparse.ArgumentParser):
    """argparse, with its mistakes told in qkv's one line (exit 2) instead of the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"qkv: error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="qkv", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of every error, before the command: qkv --debug "
        "train ... (also: environment QKV_DEBUG=1)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    train = commands.add_parser(
        "train", help="train a model (translation, captioning, classifier, language model)"
    )
    train_tasks = train.add_subparsers(dest="task", metavar="TASK")
    train_tasks.required = True
    train_commands.register(train_tasks)  # one task per registered model family
    demo_commands.register(commands)
    translation_commands.register(commands)
    evaluate_commands.register(commands)
    captioning_commands.register(commands)
    curve_commands.register(commands)
    explore_commands.register(commands)
    attention_commands.register(commands)
    classifier_commands.register(commands)
    lm_commands.register(commands)
    return parser


def exit_code_for(error: BaseException) -> int:
    """The exit status for an error that escaped a command: the error's own ``exit_code``
    when it has one (an interrupted run: 130 / 143), 2 for a mistake in what qkv was given
    (a :class:`~qkv.errors.QkvError`, a missing or unreadable user file, a full disk), 130
    for Ctrl-C, and 1 for anything else: a bug."""
    code = getattr(error, "exit_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    if isinstance(error, KeyboardInterrupt):
        return 130
    if isinstance(error, (QkvError, *USER_OS_ERRORS)):
        return 2
    if isinstance(error, OSError) and error.errno in DISK_ERRNOS:
        return 2
    return 1


def _debug_wanted(args: argparse.Namespace) -> bool:
    return args.debug or os.environ.get("QKV_DEBUG", "") not in ("", "0")


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = _debug_wanted(args)
    try:
        _read_device(args)
        return int(args.run(args) or 0)
    except Exception as error:  # noqa: BLE001 - every escape gets an exit status and a line
        return _report(error, debug=debug, args=args)
    except KeyboardInterrupt as error:
        return _report(error, debug=debug, args=args)


#: The options that name the model a command loaded, in the order looked for.
MODEL_OPTIONS = ("checkpoint", "pretrained")


def _read_device(args: argparse.Namespace) -> None:
    """``--device``, read once for every command before it starts: a name this machine
    cannot run on is one line naming what it has.  A command that loads a model gets the
    ``torch.device``; a training run keeps the name (under torchrun "auto" and "cuda" pick
    each process's own GPU)."""
    name = getattr(args, "device", None)
    if name is None:
        return
    device = parse_device(name)
    if getattr(args, "loads_on_device", False):
        args.device = device


def _one_line_with_flags(error: BaseException, args: argparse.Namespace) -> str:
    """The error's line, and the flags that set the config fields it names; an error about
    the model's numbers (NaN scores) opens with the checkpoint or folder it was loaded from."""
    line = _one_line(error)
    if isinstance(error, NotFiniteError):
        loaded = [getattr(args, name) for name in MODEL_OPTIONS if getattr(args, name, None)]
        line = f"{loaded[0]}: {line}" if loaded else line
    flags = flags_of(args, getattr(error, "fields", ()))
    return f"{line} (set by {', '.join(flags)})" if flags else line


def _report(error: BaseException, *, debug: bool, args: argparse.Namespace) -> int:
    code = exit_code_for(error)
    if code == 1:
        print(BUG_LINE, file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
        return code
    if debug:
        traceback.print_exception(error, file=sys.stderr)
    if isinstance(error, KeyboardInterrupt) and not str(error):
        print("qkv: interrupted", file=sys.stderr)
    elif code == 2:
        print(f"qkv: error: {_one_line_with_flags(error, args)}", file=sys.stderr)
    else:  # an interrupted run (130 / 143): its line names the field that resumes it
        print(f"qkv: {_one_line_with_flags(error, args)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
