"""What the subcommands share: a parser with examples, the options of a command that reads a
run, and a `qkv train` run's report.  The options built from dataclasses are in
:mod:`.options`."""

from __future__ import annotations

import argparse

from ..training import TrainResult

__all__ = [
    "add_command",
    "add_checkpoint_options",
    "add_device_option",
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
