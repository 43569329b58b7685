"""A model family as one typed record, and the registry every command reads.

A family (the translators, the captioner, the classifiers, the language model, or one of a
user's own) is everything qkv needs to train, score and look at its models, said once:

    name            `qkv train NAME`, and how the family is named in messages
    model_types     the checkpoint kinds it owns (``qkv.models.register_model``'s names)
    setup           its setup dataclass; each field's ``metadata["help"]`` is its option
    presets         its sizes (label -> :class:`~qkv.tasks.presets.Preset`), as --help shows them
    spec            its parts of the training skeleton (:class:`~qkv.tasks.task.TaskSpec`)
    command         the prose of `qkv train NAME` (help, description, examples)
    train           the run and its report (default: :func:`train_with_spec`)
    score           `qkv evaluate` of one of its checkpoints
    explorers       model type -> explorer adapter: the page kind, views and live pass
    view            how `qkv explore --checkpoint` opens one of its checkpoints
    loader          how one of its checkpoints loads, as a :class:`~qkv.models.LoadedModel`
                    (`qkv generate`, `qkv attention`)
    reads_text      whether `qkv attention --checkpoint` draws its attention on one text
                    (False: the command decodes, as a translator)
    commands        model type -> the commands that read its checkpoints, told when one is
                    given to a command of another family

and, written by nobody, ``modules``: the modules that are its own (its kind strings may be
named there), found from what the record holds (:func:`own_modules`).

:func:`register_family` adds one; :func:`families` lists them in the order registered (the
order of `qkv train --help`); :func:`family_of_type` finds the family of a checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from torch import Tensor

from ..errors import CheckpointError, InputError
from ..explore import ExplorerAdapter, explore, register_explorer
from ..models import LoadedModel
from ..models.registry import available_models, model_classes
from ..tasks.evaluate import Evaluation, EvaluationRequest
from ..tasks.presets import Preset
from ..tasks.task import TaskSpec, train_with_options
from ..tasks.translator import OTHER_TASKS
from ..training import TrainConfig, TrainResult, checkpoint_model_type
from ..training.schedules import available_schedules, schedule_kind

if TYPE_CHECKING:  # the type checkers' name for "an instance of a dataclass"
    from _typeshed import DataclassInstance

__all__ = [
    "Family",
    "TrainCommand",
    "Trained",
    "Trainer",
    "Scorer",
    "ExplorerView",
    "ExplorerPage",
    "ViewRequest",
    "explore_with",
    "Loader",
    "AnyFamily",
    "train_with_spec",
    "register_family",
    "families",
    "family_named",
    "family_of_type",
    "family_of_checkpoint",
    "evaluate_checkpoint",
    "own_modules",
]

S = TypeVar("S", bound="DataclassInstance")  # a family's setup is a dataclass
R = TypeVar("R")
V = TypeVar("V")
S_contra = TypeVar("S_contra", bound="DataclassInstance", contravariant=True)

#: Where a run tells what it does, line by line (the CLI: print).
Say = Callable[[str], object]


@dataclass(frozen=True)
class Trained:
    """What a finished `qkv train` run reports.

    result: how the run ended.
    checkpoint: what the ``checkpoint:`` line names (the run folder, or the kept checkpoint
        and its size).
    summary: appended to the ``done:`` line (empty: the best validation metric).
    lines: more lines after those two (a classifier's test scores).
    json: what ``--json`` prints instead (None: the family's command has no ``--json``)."""

    result: TrainResult
    checkpoint: str
    summary: str = ""
    lines: tuple[str, ...] = ()
    json: Mapping[str, object] | None = None


class Trainer(Protocol[S_contra]):
    """Train a setup into ``out_dir`` with the trainer values the user ``given``."""

    def __call__(
        self,
        setup: S_contra,
        out_dir: str,
        *,
        given: Mapping[str, object],
        resume: bool,
        say: Say,
    ) -> Trained: ...


class Scorer(Protocol):
    """`qkv evaluate` of one checkpoint of the family."""

    def __call__(self, checkpoint: str | Path, request: EvaluationRequest) -> Evaluation: ...


@dataclass(frozen=True)
class ViewRequest:
    """What `qkv explore` was asked besides the checkpoint and its inputs (each family reads
    the fields that apply to it; the command has refused the others already)."""

    device: str = "cpu"
    test: int | None = None
    beam: int = 4
    length_penalty: float = 1.0
    max_len: int | None = None
    generate: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    vectors: str | None = None


@dataclass(frozen=True)
class ExplorerPage:
    """An opened checkpoint on the explorer page: the page's data, and the loaded model (its
    model and tokenizer) a live page embeds (None: the family's pages are static)."""

    data: dict[str, object]
    loaded: LoadedModel | None = None


def explore_with(
    loaded: LoadedModel,
    inputs: Sequence[str | Sequence[int] | Tensor],
    request: ViewRequest,
    *,
    names: Sequence[str] | None = None,
) -> ExplorerPage:
    """The page of a loaded model on ``inputs`` under every option of ``request``
    (:func:`qkv.explore.explore`; its adapter reads those that apply)."""
    data = explore(
        loaded.model,
        inputs,
        tokenizer=loaded.tokenizer,
        beam=request.beam,
        length_penalty=request.length_penalty,
        max_len=request.max_len,
        names=names,
        generate=request.generate,
        temperature=request.temperature,
        top_k=request.top_k,
        seed=request.seed,
        vectors=request.vectors,
    )
    return ExplorerPage(data, loaded)


class ExplorerView(Protocol):
    """How `qkv explore --checkpoint` opens a checkpoint of the family on its ``inputs``."""

    def __call__(
        self, checkpoint: str, inputs: Sequence[str], request: ViewRequest
    ) -> ExplorerPage: ...


class Loader(Protocol):
    """How a checkpoint (a run or step folder) of the family loads: its model (eval mode)
    and tokenizer, named for messages, with the run's setup."""

    def __call__(self, checkpoint: str | Path, /, *, device: str = "cpu") -> LoadedModel: ...


@dataclass(frozen=True)
class TrainCommand:
    """The prose of `qkv train NAME`: ``help`` (the line in `qkv train --help`), the
    ``description`` and ``examples`` of its own --help, what ``--out`` holds, the options
    renamed (field -> flag), the trainer defaults said in words (field -> text) and, where
    the run prints scores, the help of ``--json``."""

    help: str
    description: str
    examples: str
    out_help: str
    flags: Mapping[str, str] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    json_help: str | None = None


@dataclass(frozen=True)
class Family(Generic[S, R, V]):
    """One model family, everything about it in one place (the module docstring lists the
    fields).  ``S`` is its setup dataclass, ``R`` and ``V`` the raw data and vocabulary of
    its :class:`~qkv.tasks.task.TaskSpec`."""

    name: str
    model_types: tuple[str, ...]
    setup: type[S]
    presets: Mapping[str, Preset]
    spec: TaskSpec[S, R, V]
    command: TrainCommand
    train: Trainer[S]
    score: Scorer
    explorers: Mapping[str, ExplorerAdapter]
    view: ExplorerView
    loader: Loader
    reads_text: bool = False
    commands: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [name for name in self.model_types if name not in self.explorers]
        if missing:
            raise TypeError(f"family {self.name!r}: no explorer adapter for {missing}")
        foreign = [name for name in self.commands if name not in self.model_types]
        if foreign:
            raise TypeError(f"family {self.name!r}: commands for types not its own: {foreign}")

    @property
    def modules(self) -> frozenset[str]:
        """The modules that are the family's own: :func:`own_modules` of the record."""
        return own_modules(self)


def train_with_spec(
    spec: TaskSpec[S, R, V], summary: Callable[[TrainResult], str] | None = None
) -> Trainer[S]:
    """The plain run of a family: :func:`~qkv.tasks.task.train_with_options` with the
    family's ``spec``, reported with the run folder and ``summary(result)``."""

    def run(
        setup: S, out_dir: str, *, given: Mapping[str, object], resume: bool, say: Say
    ) -> Trained:
        result = train_with_options(spec, setup, out_dir, given=given, resume=resume, say=say)
        return Trained(result, out_dir, summary(result) if summary is not None else "")

    return run


#: Each family has its own setup, data and vocabulary types: the registry holds families of
#: any (what Python's typing cannot say otherwise: "some S, R, V" per entry).
AnyFamily = Family[Any, Any, Any]
_FAMILIES: dict[str, AnyFamily] = {}


#: The options of every `qkv train` task besides its setup's fields.
COMMAND_OPTIONS = ("out", "json", "resume", "threads", "beta2")


def trainer_names() -> set[str]:
    """The names a setup field may not take: the trainer's options (TrainConfig's fields,
    every schedule's options) and those every `qkv train` task has."""
    names = {item.name for item in dataclasses.fields(TrainConfig)} | set(COMMAND_OPTIONS)
    for schedule in available_schedules():
        names |= set(schedule_kind(schedule).options)
    return names


def register_family(family: Family[S, R, V]) -> Family[S, R, V]:
    """Make ``family`` one of those every command reads (its explorer adapters too).  A name
    or a model type another family holds, a setup field without a help, or one named as a
    trainer option (its flag would clash) is refused here, before any parser is built."""
    for item in dataclasses.fields(family.setup):
        if "help" not in item.metadata:
            raise TypeError(
                f"{family.setup.__name__}.{item.name} has no metadata['help']: declare it "
                "with qkv.tasks.task.setup_field, so that its option says what it does"
            )
    clashing = sorted({item.name for item in dataclasses.fields(family.setup)} & trainer_names())
    if clashing:
        raise TypeError(
            f"family {family.name!r}: setup fields {clashing} are named as trainer options; "
            "rename them"
        )
    taken = {t: f.name for f in _FAMILIES.values() for t in f.model_types if f.name != family.name}
    clash = [t for t in family.model_types if t in taken]
    if clash:
        raise InputError(f"family {family.name!r}: model types {clash} belong to another family")
    for model_type, adapter in family.explorers.items():
        register_explorer(model_type, adapter)
    OTHER_TASKS.update(family.commands)
    _FAMILIES[family.name] = family
    return family


def families() -> list[AnyFamily]:
    """The registered families, in the order registered."""
    return list(_FAMILIES.values())


def family_named(name: str) -> AnyFamily:
    """The family registered as ``name``, or an InputError naming those known."""
    if name not in _FAMILIES:
        raise InputError(f"no model family {name!r}; known: {', '.join(_FAMILIES)}")
    return _FAMILIES[name]


def family_of_type(model_type: str) -> AnyFamily | None:
    """The family that owns checkpoints of ``model_type`` (None: no family does)."""
    for family in _FAMILIES.values():
        if model_type in family.model_types:
            return family
    return None


def family_of_checkpoint(checkpoint: str | Path) -> tuple[str, AnyFamily | None]:
    """The model type a checkpoint holds, and the family that owns it (None: none)."""
    model_type = checkpoint_model_type(checkpoint)
    return model_type, family_of_type(model_type)


def evaluate_checkpoint(checkpoint: str | Path, request: EvaluationRequest) -> Evaluation:
    """Score ``checkpoint`` (a run folder: its best checkpoint; or a step folder) by what its
    family's task means (`qkv evaluate`)."""
    from ..tasks.translator import reading_errors

    with reading_errors(CheckpointError):
        model_type, family = family_of_checkpoint(checkpoint)
    if family is None:
        scored = ", ".join(t for f in _FAMILIES.values() for t in f.model_types)
        raise CheckpointError(
            f"{checkpoint} holds a {model_type!r} model, which has no scorer; scored are {scored}"
        )
    return family.score(checkpoint, request)


#: What the record's values are made of but no family owns: the skeleton's own defaults
#: (a TaskSpec's, train_with_spec's run) and plain data.
_SKELETON = frozenset({__name__, TaskSpec.__module__, "builtins", "pathlib"})


def own_modules(family: AnyFamily) -> frozenset[str]:
    """The modules that define what ``family``'s record holds: its setup class, its spec's
    parts, its functions, its explorer adapters (and whatever else a field holds: found by
    walking the fields, so a field added later counts too) and the config and model classes
    registered under its model types, less the skeleton's modules.  A module the record
    does not reach (a helper its functions call) is not the family's own by this measure,
    which keeps the families' kind strings out of shared code."""
    found: set[str] = set()
    for model_type in set(family.model_types) & set(available_models()):
        found.update(kind.__module__ for kind in model_classes(model_type))
    pending: list[object] = [getattr(family, item.name) for item in dataclasses.fields(family)]
    seen: set[int] = set()
    while pending:
        value = pending.pop()
        if id(value) in seen or value is None or isinstance(value, (str, int, float, bool)):
            continue
        seen.add(id(value))
        if isinstance(value, Mapping):
            pending += [*value.keys(), *value.values()]
        elif isinstance(value, (tuple, list, set, frozenset)):
            pending += list(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            pending += [getattr(value, item.name) for item in dataclasses.fields(value)]
        elif isinstance(value, type) or callable(value):  # a class, a function, a method
            found.add(getattr(value, "__module__", None) or type(value).__module__)
        else:  # an instance (an explorer adapter): its class's module
            found.add(type(value).__module__)
    return frozenset(found - _SKELETON)
