"""Training a task: the one skeleton every model family goes through.

    run folder checked -> setup prepared -> data read -> vocabulary (fresh, or the run's when
    resuming) -> seed -> model built -> datasets -> metadata -> recipe fitted -> train

Each family supplies its parts as a :class:`TaskSpec` (``translation``, ``captioning``,
``lm``, ``classifier``); the order, the run-folder checks, the seeding and the recipe are
here, once.  :func:`train_with_options` also makes the run's ``TrainConfig`` from the
family's preset and the values a user gave (what `qkv train` calls).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from ..data.batch import Batch
from ..errors import InputError, RunError
from ..training import TrainConfig, TrainingData, TrainResult, read_pointer, train
from ..training.recipes import UserSchedule, fit_train_config, resumed_schedule
from .presets import Preset

__all__ = [
    "TaskData",
    "TaskSpec",
    "train_task",
    "train_with_options",
    "train_config",
    "check_run_folder",
    "check_choices",
    "use_threads",
    "setup_field",
]

#: The TrainConfig fields a fitted recipe chooses when the user does not give them.
RECIPE_FIELDS = tuple(field.name for field in dataclasses.fields(UserSchedule))


@dataclass(frozen=True)
class TaskData:
    """What a family's ``datasets`` step gives the skeleton.

    evaluate: validation metrics of a model (the trainer logs them; None: the loss only).
    metadata: facts stored in every checkpoint besides ``task`` and ``setup`` (JSON-able).
    sample: ``sample(config)`` -> a typical training batch under ``config`` and the updates
        per epoch (None: unknown), for fitting the recipe to the budget.
    probe: the model whose steps are timed for the recipe (None: the run's own)."""

    train: TrainingData
    valid: TrainingData | None = None
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None
    metadata: Mapping[str, object] = field(default_factory=dict)
    sample: Callable[[TrainConfig], tuple[Batch, int | None]] | None = None
    probe: Callable[[], nn.Module] | None = None


S = TypeVar("S")  # the family's setup dataclass
R = TypeVar("R")  # the raw data a setup reads (its splits)
V = TypeVar("V")  # the vocabulary (a tokenizer, a word list, a language model's start)


def _no_tokenizers(vocabulary: object) -> dict[str, object]:
    return {}


def _as_given(setup: S, say: Callable[[str], object]) -> S:
    return setup


@dataclass(frozen=True)
class TaskSpec(Generic[S, R, V]):
    """One model family's parts of the skeleton: ``S`` its setup dataclass, ``R`` the raw
    data a setup reads, ``V`` its vocabulary.

    task: the checkpoints' ``metadata["task"]``.
    preset: the setup's :class:`~qkv.tasks.presets.Preset` (family and size).
    read: the raw data of a setup (its splits), read before anything is built.
    vocabulary: a fresh vocabulary from the raw data (None: the family has none).
    saved_vocabulary: the vocabulary of the run in a folder (resuming).
    tokenizers: the files the vocabulary is saved as in each checkpoint.
    build: the model of a setup over a vocabulary.
    datasets: the trainer's data, validation metrics and metadata.
    prepare: ``prepare(setup, say)`` -> the setup as trained, told through ``say`` where it
        differs (the captioner takes a classifier's encoder fields)."""

    task: str
    preset: Callable[[S], Preset]
    read: Callable[[S], R]
    build: Callable[[S, R, V | None], nn.Module]
    datasets: Callable[[S, nn.Module, R, V | None], TaskData]
    vocabulary: Callable[[S, R], V] | None = None
    saved_vocabulary: Callable[[Path], V] | None = None
    tokenizers: Callable[[V], Mapping[str, object]] = _no_tokenizers
    prepare: Callable[[S, Callable[[str], object]], S] = _as_given


T = TypeVar("T")


def setup_field(
    default: T,
    help: str,
    *,
    choices: tuple[T, ...] | None = None,
    group: str | None = None,
) -> T:
    """A field of a family's setup dataclass with what its command-line option needs: the
    option's ``help`` (``--help`` shows it; no field goes without one), the values it may
    take (``choices``, checked by :func:`check_choices` too) and the ``--help`` section it is
    listed under (``group``; None: the command's own options).  The CLI makes one option
    per field from this metadata, in the field order."""
    metadata: dict[str, object] = {"help": help}
    if choices is not None:
        metadata["choices"] = choices
    if group is not None:
        metadata["group"] = group
    made: T = field(default=default, metadata=metadata)  # dataclasses reads the Field back
    return made


def check_choices(setup: Any, names: tuple[str, ...]) -> None:
    """Refuse a named field of the ``setup`` dataclass whose value is not one of the
    ``metadata["choices"]`` its field declares (the list the CLI offers too)."""
    declared = {
        item.name: item.metadata["choices"]
        for item in dataclasses.fields(setup)
        if "choices" in item.metadata
    }
    for name in names:
        value, choices = getattr(setup, name), declared[name]
        if value not in choices:
            raise InputError(
                f"unknown {name} {value!r}; choose from {list(choices)}", fields=(name,)
            )


def check_run_folder(out_dir: str | Path, *, resume: bool) -> Path:
    """``out_dir`` if a run can start (or resume) there; refused before anything is read or
    written, so that a refused run leaves the folder as it was."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"out_dir {str(out_dir)!r} is a file, not a run folder; choose a new one")
    last = read_pointer(out_dir, "last") if out_dir.is_dir() else None
    if resume and last is None:
        raise RunError(f"{out_dir} has no checkpoint to resume from; start the run without resume")
    if not resume and last is not None:
        raise RunError(
            f"{out_dir} already holds a run (its last checkpoint is {last}); resume it, or "
            "choose a new out_dir"
        )
    return out_dir


def train_task(
    spec: TaskSpec[S, R, V],
    setup: S,
    config: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    schedule: UserSchedule | None = None,
    say: Callable[[str], object] | None = None,
) -> TrainResult:
    """Train ``setup`` with ``spec``'s parts; checkpoints (weights, config, vocabulary) go to
    ``out_dir``.  With ``resume`` the vocabulary and model come from the run's last
    checkpoint, so the run continues exactly where it stopped.

    ``schedule`` None trains with ``config`` as it is.  A :class:`UserSchedule` lets the
    preset's recipe choose the learning rate, warm-up and batch tokens for this run's budget,
    except the values the user gave; a resumed run keeps the values it started with.  The
    choice is recorded in the checkpoint's metadata (``"schedule"``) and told through
    ``say``."""
    out_dir = check_run_folder(out_dir, resume=resume)
    setup = spec.prepare(setup, say or (lambda line: None))
    raw = spec.read(setup)
    vocabulary = None
    if resume and spec.saved_vocabulary is not None:
        vocabulary = spec.saved_vocabulary(out_dir)
    elif spec.vocabulary is not None:
        vocabulary = spec.vocabulary(setup, raw)
    torch.manual_seed(config.seed)  # the same command twice builds the same initial model
    model = spec.build(setup, raw, vocabulary)
    data = spec.datasets(setup, model, raw, vocabulary)
    metadata = {"task": spec.task, "setup": dataclasses.asdict(setup), **data.metadata}
    recipe = spec.preset(setup).recipe
    if schedule is not None and recipe is not None and data.sample is not None:
        if resume:
            schedule = resumed_schedule(out_dir, schedule)
        with torch.random.fork_rng():  # a probe model leaves the run's initialisation alone
            probe = model if data.probe is None else data.probe()
        config, chosen = fit_train_config(config, recipe, schedule, model=probe, sample=data.sample)
        metadata["schedule"] = chosen.as_dict()
        if say is not None:
            say(chosen.describe())
    if data.valid is None and config.schedule == "plateau":
        raise InputError(
            "the plateau schedule (the preset's, or schedule='plateau') lowers the lr when "
            "the validation loss stalls, and the data has no validation split: give "
            "validation data, or schedule='inverse_sqrt'",
            fields=("valid", "schedule"),
        )
    return train(
        model,
        data.train,
        data.valid,
        config,
        out_dir,
        evaluate=data.evaluate,
        metadata=metadata,
        tokenizers=spec.tokenizers(vocabulary) if vocabulary is not None else {},
        resume=resume,
    )


def train_config(preset: Preset, given: Mapping[str, Any], *, fitted: bool = False) -> TrainConfig:
    """The run's TrainConfig: TrainConfig's defaults, then the preset's ``train`` values, then
    what the user ``given``.  ``fitted``: the recipe chooses the learning rate later (and
    checks ``min_lr`` against it then), so an lr not given only holds a place here."""
    values = {**preset.train, **given}
    options = {**preset.train.get("schedule_options", {}), **given.get("schedule_options", {})}
    if options:
        values["schedule_options"] = options
    if fitted and "lr" not in given:
        values["lr"] = max(values.get("lr", TrainConfig.lr), values.get("min_lr", 0.0))
    try:
        return TrainConfig(**values)
    except ValueError as error:  # TrainConfig checks every value and names the bad one
        if isinstance(error, InputError):
            raise
        raise InputError(f"training options: {error}") from error


def train_with_options(
    spec: TaskSpec[S, R, V],
    setup: S,
    out_dir: str | Path,
    *,
    given: Mapping[str, Any],
    resume: bool = False,
    say: Callable[[str], object] | None = None,
) -> TrainResult:
    """:func:`train_task` with the TrainConfig a user's values make over the family's preset:
    a preset with a recipe fits the values the user did not give to the run's budget."""
    preset = spec.preset(setup)
    fitted = preset.recipe is not None
    config = train_config(preset, given, fitted=fitted)
    schedule = None
    if fitted:
        schedule = UserSchedule(**{name: given[name] for name in RECIPE_FIELDS if name in given})
    return train_task(spec, setup, config, out_dir, resume=resume, schedule=schedule, say=say)


def use_threads(threads: int | None) -> None:
    """Let torch use ``threads`` CPU threads (None: torch's choice)."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads={threads!r} must be at least 1", fields=("threads",))
    torch.set_num_threads(threads)
