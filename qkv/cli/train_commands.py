"""`qkv train FAMILY`: one subcommand per registered model family (:mod:`qkv.families`),
its options made from the family's setup dataclass and presets, its run and report the
family's own."""

from __future__ import annotations

import argparse
import json

from ..families import AnyFamily, families
from ..tasks.task import use_threads
from .commands import add_command, report_run
from .options import add_task_options, given_train_values, setup_from

__all__ = ["register"]


def register(tasks: argparse._SubParsersAction) -> None:
    """Add `qkv train NAME` for every registered family (to ``tasks``, the subcommands of
    `qkv train`), in the order the families were registered."""
    for family in families():
        add_train_parser(tasks, family)


def add_train_parser(tasks: argparse._SubParsersAction, family: AnyFamily) -> None:
    """`qkv train NAME` of one family: ``--out``, ``--json`` where the family prints scores,
    an option per setup field, then the trainer's options with the family's defaults."""
    command = family.command
    parser = add_command(
        tasks,
        family.name,
        help=command.help,
        description=command.description,
        examples=command.examples,
    )
    parser.add_argument("--out", required=True, help=command.out_help)
    if command.json_help is not None:
        parser.add_argument("--json", action="store_true", help=command.json_help)
    add_task_options(parser, family.setup, family.presets, flags=command.flags, notes=command.notes)
    parser.set_defaults(run=lambda args: _train(family, args))


def _train(family: AnyFamily, args: argparse.Namespace) -> int:
    """Apply ``--threads``, train the family's setup the options describe with the trainer
    values the user gave, and print its report."""
    use_threads(args.threads)
    trained = family.train(
        setup_from(args, family.setup),
        args.out,
        given=given_train_values(args),
        resume=args.resume,
        say=print,
    )
    if getattr(args, "json", False) and trained.json is not None:
        print(json.dumps(dict(trained.json)))
        return 0
    report_run(trained.result, trained.checkpoint, trained.summary)
    for line in trained.lines:
        print(line)
    return 0
