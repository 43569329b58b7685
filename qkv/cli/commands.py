"""What the subcommands share: a parser with examples, the options of a command that reads a
run, and a `qkv train` task's run and report.  The options built from dataclasses are in
:mod:`.options`."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

from ..tasks.task import TaskSpec, train_with_options, use_threads
from ..training import TrainResult
from .options import given_train_values, setup_from

__all__ = [
    "add_command",
    "add_checkpoint_options",
    "add_device_option",
    "train_from_args",
    "train_task_from_args",
    "report_run",
]


def add_command(
    commands: argparse._SubParsersAction, name: str, *, help: str, description: str, examples: str
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows ``description`` as written, then the ``examples``
    (one command a line)."""
    example = "\n  ".join(examples.splitlines())
    return commands.add_parser(
        name,
        help=help,
        description=f"{description}\n\nexample:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint`` (required) and ``--device``: what every command reading a run takes."""
    parser.add_argument("--checkpoint", required=True, help="a run folder or a step folder")
    add_device_option(parser)


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """``--device`` of a command that loads a model: the name as given; ``qkv.cli.main``
    reads it once for every command (:func:`~qkv.training.devices.parse_device`) and hands
    the command a ``torch.device`` (``loads_on_device``)."""
    parser.add_argument(
        "--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (default: cpu)"
    )
    parser.set_defaults(loads_on_device=True)


def train_from_args(train: Callable[..., TrainResult], setup: Any, args: argparse.Namespace):
    """Apply ``--threads``, then call a task's ``train(setup, out_dir, given=..., resume=...,
    say=...)`` with the trainer values the user gave."""
    use_threads(args.threads)
    return train(setup, args.out, given=given_train_values(args), resume=args.resume, say=print)


def train_task_from_args(task: TaskSpec, setup_type: type, args: argparse.Namespace) -> TrainResult:
    """Train ``task`` (:func:`~qkv.tasks.task.train_with_options`) on the ``setup_type`` the
    parsed options describe, with the trainer values the user gave (:func:`train_from_args`)."""
    train = functools.partial(train_with_options, task)
    return train_from_args(train, setup_from(args, setup_type), args)


def report_run(result: TrainResult, checkpoint: str, summary: str = "") -> int:
    """The two lines every `qkv train` prints: what the run did, and where it is."""
    best = summary
    if not best and result.best_metric:
        best = f", best {result.best_metric} {result.best_value:.4g} at step {result.best_step}"
    print(
        f"done: {result.steps} steps, {result.epochs} epochs, {result.elapsed:.0f} s, "
        f"stopped by {result.stop_reason}{best}"
    )
    print(f"checkpoint: {checkpoint}")
    return 0
