"""The family record: typed through (no Any, no Callable[..., Any] in its fields), and what
it refuses at registration, before any parser is built."""

import dataclasses
import sys
import typing
from collections.abc import Callable

import pytest

import qkv.families.record as record
from qkv.families import Family, families, register_family
from qkv.tasks.task import TaskSpec, setup_field


def _loose(hint, seen=()) -> list[str]:
    """The places of ``hint`` that are Any or a Callable[..., X]."""
    if hint is typing.Any:
        return ["Any"]
    found = []
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is Callable and arguments and arguments[0] is Ellipsis:
        found.append(f"Callable[..., {arguments[1]}]")
    for argument in arguments:
        if isinstance(argument, list):  # Callable's parameter list
            for item in argument:
                found += _loose(item)
        elif argument is not Ellipsis:
            found += _loose(argument)
    return found


@pytest.mark.parametrize("record_type", [Family, TaskSpec, record.TrainCommand, record.Trained])
def test_the_record_has_no_any_field(record_type):
    module = vars(sys.modules[record_type.__module__])
    hints = typing.get_type_hints(record_type, module)
    loose = {name: _loose(hint) for name, hint in hints.items() if _loose(hint)}
    assert loose == {}


def test_the_check_sees_any():
    assert _loose(typing.Any) == ["Any"]
    assert _loose(Callable[..., int]) == ["Callable[..., <class 'int'>]"]
    assert _loose(Callable[[typing.Any], int]) == ["Any"]
    assert _loose(dict[str, int] | None) == []


def test_every_built_in_family_is_registered_in_the_order_of_train_help():
    names = [family.name for family in families()]
    assert names[:4] == ["translation", "captioning", "classifier", "lm"]


def _family(setup, **changes):
    values = dict(name="other", model_types=(), explorers={}, commands={}, setup=setup)
    return dataclasses.replace(families()[0], **(values | changes))


def test_a_setup_field_without_help_is_refused_at_registration():
    @dataclasses.dataclass(frozen=True)
    class Bare:
        data: str = "x"

    with pytest.raises(TypeError, match=r"Bare.data has no metadata\['help'\]"):
        register_family(_family(Bare))


def test_a_setup_field_named_as_a_trainer_option_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Clash:
        seed: int = setup_field(0, "a seed of its own")

    with pytest.raises(TypeError, match=r"\['seed'\] are named as trainer options"):
        register_family(_family(Clash))


def test_commands_for_another_family_s_types_are_refused():
    with pytest.raises(TypeError, match="commands for types not its own"):
        _family(families()[0].setup, commands={"lm": "qkv generate"})
