"""Options built from dataclasses: a task's Setup fields and the trainer's TrainConfig fields.

Each option's name, type, choices and default come from the field (a field's
``metadata["choices"]`` lists its values); the defaults of the trainer's options come from
the family's presets (``qkv.tasks.presets``), and a setup field's help from its own
metadata, so ``--help`` reads the same record the library trains with.  Only the trainer's
help prose is the CLI's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..tasks.presets import Preset
from ..tasks.task import RECIPE_FIELDS
from ..training import TrainConfig
from ..training.config import OPTIMIZERS, SCHEDULES
from ..training.recipes import WARMUP_FRACTION
from ..training.schedules import schedule_option

__all__ = [
    "add_setup_options",
    "setup_from",
    "call_with_options",
    "add_train_options",
    "add_task_options",
    "given_train_values",
    "record_flags",
    "flags_of",
]

_DEFAULTS = TrainConfig()
_FIELDS = {field.name for field in dataclasses.fields(TrainConfig)}

#: The trainer's options: TrainConfig field, or a schedule's option (``schedule_options``),
#: -> help (the default is added from the presets).
TRAIN_HELP: dict[str, str] = {
    "epochs": "epoch budget (0 = no epoch limit)",
    "max_steps": "optimizer-step budget",
    "max_minutes": "wall-clock budget; stops cleanly and keeps the best checkpoint",
    "seed": "seed for initialisation, dropout and data order",
    "lr": "peak learning rate",
    "schedule": "learning-rate schedule after warm-up: inverse_sqrt (lr * sqrt(warm-up / "
    "step)), cosine (down to min_lr at the last step) or plateau (constant, lowered when the "
    "validation loss stops improving; see --plateau-factor, --plateau-patience)",
    "min_lr": "the lowest learning rate of the cosine and plateau schedules, at most the peak "
    "--lr (the plateau schedule stops lowering there)",
    "plateau_factor": "--schedule plateau: multiply the lr by this, in (0, 1), at each plateau",
    "plateau_patience": "--schedule plateau: validations without a lower validation loss "
    "before the lr is lowered; give early stopping's --patience a larger value, or the lower "
    "rates are never tried",
    "warmup_steps": "linear warm-up steps",
    "label_smoothing": "epsilon of label-smoothed cross-entropy, 0 = off",
    "clip_norm": "gradient-norm clipping (0 = off)",
    "optimizer": "adamw, or muon: Muon's orthogonalised updates for the hidden weight "
    "matrices, AdamW for embeddings, the output layer, biases and norms (one --lr for both)",
    "weight_decay": "weight decay of the weight matrices",
    "accumulate": "batches per optimizer step (gradient accumulation)",
    "max_tokens": "tokens per batch, padding included",
    "bf16": "bfloat16 autocast",
    "validate_every": "steps between validations and checkpoints",
    "eval_batches": "validate on this many validation batches, the same ones each time, and "
    "on all of them at the end (0 = all every time)",
    "patience": "early stopping: validations without improvement",
    "log_every": "steps between log lines",
    "device": "auto (a GPU when present), cpu or cuda",
    "context_parallel": "processes sharing each training window through ring attention "
    "(train lm under torchrun; the process count must be a multiple)",
}
_FITTED = {
    "warmup_steps": f", cut to {WARMUP_FRACTION * 100:.0f}%% of the planned steps when the "
    "budget is short; for --max-minutes the steps/s are measured on a few batches first",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _value_type(hint: Any) -> type:
    """int, float, str or bool of a field's annotation (``X | None`` -> X)."""
    arguments = [a for a in typing.get_args(hint) if a is not type(None)]
    return arguments[0] if arguments else hint


def add_setup_options(
    parser: argparse.ArgumentParser,
    setup_type: type,
    *,
    flags: Mapping[str, str] | None = None,
) -> None:
    """One option per field of ``setup_type``, in the field order, with the help, choices and
    ``--help`` group of its metadata (:func:`~qkv.tasks.task.setup_field`); a field without a
    help is an error here, so no field can be left without its option.  A bool field that
    defaults to True is turned off by ``--no-x``; ``flags`` renames an option (field -> flag)."""
    hints = typing.get_type_hints(setup_type)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field in dataclasses.fields(setup_type):
        name = field.name
        if "help" not in field.metadata:
            raise TypeError(
                f"{setup_type.__name__}.{name} has no metadata['help']: declare it with "
                "qkv.tasks.task.setup_field, so that its option says what it does"
            )
        text, title = field.metadata["help"], field.metadata.get("group")
        target: argparse._ActionsContainer = parser
        if title is not None:
            if title not in groups:
                groups[title] = parser.add_argument_group(title)
            target = groups[title]
        kind = _value_type(hints[name])
        flag = (flags or {}).get(name, _flag(name))
        if kind is bool and field.default is True:
            flag = "--no-" + flag[2:]
        record_flags(parser, **{name: flag})
        if kind is bool:
            action = "store_false" if field.default is True else "store_true"
            target.add_argument(flag, dest=name, action=action, help=text)
            continue
        if field.default is not None and "default" not in text:
            text = f"{text} (default: {field.default})"
        target.add_argument(
            flag,
            dest=name,
            type=kind,
            default=field.default,
            choices=field.metadata.get("choices"),
            help=text,
        )


def setup_from(args: argparse.Namespace, setup_type: type) -> Any:
    """The setup the parsed options describe (fields without an option keep their default)."""
    names = [field.name for field in dataclasses.fields(setup_type)]
    return setup_type(**{name: getattr(args, name) for name in names if hasattr(args, name)})


def call_with_options(
    fn: Callable[..., Any], args: argparse.Namespace, *positional: Any, **given: Any
) -> Any:
    """``fn(*positional, **keywords)``: each parameter of ``fn`` that ``positional`` leaves
    and a keyword can set takes the parsed option of its name, where ``args`` has one;
    ``given`` adds or overrides values the command computes.  Others keep ``fn``'s default."""
    signature = inspect.signature(fn)
    bound = signature.bind_partial(*positional).arguments
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = [p.name for p in signature.parameters.values() if p.kind in keyword]
    options = {n: getattr(args, n) for n in names if n not in bound and hasattr(args, n)}
    return fn(*positional, **(options | given))


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _train_default(name: str, presets: Mapping[str, Preset]) -> str:
    """What the family's presets make of a TrainConfig field, for ``--help``: the recipe's
    value per size where a recipe chooses it, else the preset's or TrainConfig's."""
    own = getattr(_DEFAULTS, name) if name in _FIELDS else schedule_option(name).default
    fallback = {label: p.train.get(name, own) for label, p in presets.items()}
    fitted = {
        label: getattr(p.recipe, name)
        for label, p in presets.items()
        if p.recipe is not None and name in RECIPE_FIELDS and name not in p.train
    }
    chosen = {label: value for label, value in fitted.items() if value is not None}
    if chosen:
        values = ", ".join(f"{label} {_show(value)}" for label, value in chosen.items())
        if len(chosen) < len(presets):
            values += f"; else {_show(next(iter(fallback.values())))}"
        return f"the recipe of the size: {values}{_FITTED.get(name, '')}"
    if len(set(map(str, fallback.values()))) == 1:
        return _show(next(iter(fallback.values())))
    return ", ".join(f"{label} {_show(value)}" for label, value in fallback.items())


def add_train_options(
    parser: argparse.ArgumentParser,
    presets: Mapping[str, Preset],
    *,
    notes: Mapping[str, str] | None = None,
) -> None:
    """The trainer's options, one per TrainConfig field of :data:`TRAIN_HELP`, with the
    defaults of the family's ``presets`` (label -> preset) in their help, or ``notes``'
    (field -> what sets the default).  An option not given is absent from the parsed
    arguments (:func:`given_train_values`), so the presets and the recipe choose it."""
    hints = typing.get_type_hints(TrainConfig)
    group = parser.add_argument_group("training (budgets, optimiser, checkpoints)")
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run in --out from its last checkpoint",
    )
    for name, text in TRAIN_HELP.items():
        default = (notes or {}).get(name) or _train_default(name, presets)
        kind = _value_type(hints[name]) if name in hints else schedule_option(name).type
        record_flags(parser, **{name: _flag(name)})
        if kind is bool:
            group.add_argument(
                _flag(name), action="store_true", default=argparse.SUPPRESS, help=text
            )
            continue
        # --device is read by qkv.cli.main for every command, which names this machine's
        choices = {"schedule": list(SCHEDULES), "optimizer": list(OPTIMIZERS)}.get(name)
        group.add_argument(
            _flag(name),
            dest=name,
            type=kind,
            choices=choices,
            default=argparse.SUPPRESS,
            help=text if default == "None" else f"{text} (default: {default})",
        )
    # TrainConfig.betas is a pair; the option sets its second value, as nanoGPT's beta2
    record_flags(parser, betas="--beta2", threads="--threads")
    group.add_argument(
        "--beta2",
        type=float,
        default=argparse.SUPPRESS,
        help=f"AdamW's beta2 (default: {_DEFAULTS.betas[1]:g})",
    )
    group.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's choice). Use 1 when other work "
        "shares a small machine: oversubscribed cores can make steps 10-40x slower",
    )


def add_task_options(
    parser: argparse.ArgumentParser,
    setup_type: type,
    presets: Mapping[str, Preset],
    *,
    flags: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> None:
    """What a `qkv train` task takes: an option per field of its ``setup_type``
    (:func:`add_setup_options`, with ``flags``), then the trainer's, with
    the defaults of the family's ``presets`` (:func:`add_train_options`, with ``notes``)."""
    add_setup_options(parser, setup_type, flags=flags)
    add_train_options(parser, presets, notes=notes)


def given_train_values(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields the user gave (``--epochs 0``: no epoch limit); a schedule's
    options go into ``schedule_options``."""
    given = {name: getattr(args, name) for name in TRAIN_HELP if hasattr(args, name)}
    options = {name: given.pop(name) for name in list(given) if name not in _FIELDS}
    if options:
        given["schedule_options"] = options
    if "epochs" in given:
        given["epochs"] = given["epochs"] or None
    if hasattr(args, "beta2"):
        given["betas"] = (_DEFAULTS.betas[0], args.beta2)
    return given


def record_flags(parser: argparse.ArgumentParser, *fields: str, **renamed: str) -> None:
    """Remember which flag sets each config field (``--field-name``, or ``renamed``'s), so that
    an error naming a field can say the flag (:func:`flags_of`).  An option whose flag is its
    field's name (``--beam`` for ``beam``) needs no record."""
    flags = dict(parser.get_default("flags") or {})
    flags |= {name: _flag(name) for name in fields} | renamed
    parser.set_defaults(flags=flags)


def flags_of(args: argparse.Namespace, fields: tuple[str, ...]) -> list[str]:
    """The flags (with the values given) that set ``fields`` in the parsed command."""
    flags = getattr(args, "flags", None) or {}
    shown = []
    for name in fields:
        if name not in flags and name not in vars(args):
            continue
        flag = flags.get(name, _flag(name))
        value = getattr(args, name, None)
        given = value is not None and not isinstance(value, bool)
        shown.append(f"{flag} {value}" if given else flag)
    return shown
