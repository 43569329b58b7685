"""Learning-rate schedules by name: the registry ``TrainConfig.schedule`` chooses from, each
schedule's own options, and ``build_schedule``.  The shapes themselves (multipliers wrapped
in ``LambdaLR``) are :mod:`qkv.training.lr_curves`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from . import lr_curves
from .lr_curves import *  # noqa: F403  (re-exported whole: its __all__)
from .lr_curves import PlateauLR, cosine_schedule, inverse_sqrt_schedule

__all__ = [
    *lr_curves.__all__,
    "ScheduleOption",
    "ScheduleKind",
    "register_schedule",
    "schedule_option",
    "available_schedules",
    "schedule_kind",
    "build_schedule",
]


@dataclass(frozen=True)
class ScheduleOption:
    """A knob only one schedule reads (``TrainConfig.schedule_options`` holds it by name):
    its type, its default, and ``check(value)``, which raises ValueError naming a bad one."""

    type: type
    default: Any
    check: Callable[[Any], None]


@dataclass(frozen=True)
class ScheduleKind:
    """A registered schedule: ``build(optimizer, *, warmup_steps, total_steps, floor,
    **options)`` makes it.  ``options``: the knobs only this schedule reads, by name (passed
    by those names).  ``needs_length``: it needs the run's length (``total_steps``);
    ``needs_validation``: it listens to validation losses (``observe``); ``fits_clock``: it
    can be built without a length, or with a longer one, and fitted later (``fit_length``),
    so a run on the clock (``max_minutes``) fits it to the speed of its first steps."""

    name: str
    build: Callable[..., LambdaLR]
    options: Mapping[str, ScheduleOption] = field(default_factory=dict)
    needs_length: bool = False
    needs_validation: bool = False
    fits_clock: bool = False


_SCHEDULES: dict[str, ScheduleKind] = {}


def register_schedule(kind: ScheduleKind) -> ScheduleKind:
    _SCHEDULES[kind.name] = kind
    return kind


def available_schedules() -> tuple[str, ...]:
    return tuple(_SCHEDULES)


def schedule_option(name: str) -> ScheduleOption:
    """The option called ``name`` of whichever registered schedule reads it; ValueError
    naming the options there are otherwise."""
    options = {
        option: kind.options[option] for kind in _SCHEDULES.values() for option in kind.options
    }
    if name not in options:
        raise ValueError(f"{name!r} is no schedule's option; the options are {tuple(options)}")
    return options[name]


def schedule_kind(name: str) -> ScheduleKind:
    if name not in _SCHEDULES:
        raise ValueError(f"schedule={name!r} is unknown; use one of {available_schedules()}")
    return _SCHEDULES[name]


def build_schedule(
    name: str,
    optimizer: Optimizer,
    *,
    warmup_steps: int,
    total_steps: int | None = None,
    floor: float = 0.0,
    **options: Any,
) -> LambdaLR:
    """The schedule called ``name`` ("inverse_sqrt", "cosine", "plateau" or a registered
    one); ``floor`` is the lowest lr of the cosine and plateau schedules, as a fraction of
    the peak; ``options`` are the schedule's own (the plateau's ``plateau_factor`` and
    ``plateau_patience``; those not given take their defaults), the others' are ignored."""
    kind = schedule_kind(name)
    if kind.needs_length and total_steps is None and not kind.fits_clock:
        raise ValueError(f"the {name} schedule needs total_steps")
    own = {option: options.get(option, spec.default) for option, spec in kind.options.items()}
    return kind.build(
        optimizer, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor, **own
    )


def _inverse_sqrt(optimizer: Optimizer, *, warmup_steps: int, **_: Any) -> LambdaLR:
    return inverse_sqrt_schedule(optimizer, warmup_steps=warmup_steps)


def _cosine(
    optimizer: Optimizer, *, warmup_steps: int, total_steps: int | None, floor: float
) -> LambdaLR:
    return cosine_schedule(
        optimizer, warmup_steps=warmup_steps, total_steps=total_steps, floor=floor
    )


def _plateau(
    optimizer: Optimizer,
    *,
    warmup_steps: int,
    floor: float,
    plateau_factor: float,
    plateau_patience: int,
    **_: Any,
) -> LambdaLR:
    return PlateauLR(
        optimizer,
        warmup_steps=warmup_steps,
        factor=plateau_factor,
        patience=plateau_patience,
        floor=floor,
    )


register_schedule(ScheduleKind("inverse_sqrt", _inverse_sqrt))
register_schedule(ScheduleKind("cosine", _cosine, needs_length=True, fits_clock=True))


def _check_factor(factor: Any) -> None:
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < 1:
        raise ValueError(f"plateau_factor={factor!r} must lie in (0, 1)")


def _check_patience(patience: Any) -> None:
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise ValueError(f"plateau_patience={patience!r} must be a whole number >= 1")


register_schedule(
    ScheduleKind(
        "plateau",
        _plateau,
        options={
            "plateau_factor": ScheduleOption(float, 0.5, _check_factor),
            "plateau_patience": ScheduleOption(int, 2, _check_patience),
        },
        needs_validation=True,
    )
)
