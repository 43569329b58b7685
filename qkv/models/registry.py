"""Model types by name, so a checkpoint can say what it holds and be rebuilt from its config."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

__all__ = [
    "register_model",
    "build_model",
    "model_type_of",
    "model_classes",
    "available_models",
    "config_to_dict",
    "saved_config_upgrade",
    "Upgrade",
]

#: A saved config (a dict of its fields) and its weights' shapes -> the config as it reads now.
Upgrade = Callable[[dict[str, Any], Mapping[str, tuple[int, ...]]], dict[str, Any]]

_MODELS: dict[str, tuple[type, type[nn.Module]]] = {}
_UPGRADES: dict[str, Upgrade] = {}


def register_model(
    name: str, config_class: type, model_class: type[nn.Module], *, upgrade: Upgrade | None = None
) -> None:
    """Make ``model_class(config_class(**fields))`` buildable by ``name``.

    A model class takes its frozen config dataclass as its only argument and keeps it as
    ``self.config``.  ``upgrade`` reads a config saved before one of its defaults changed
    meaning as the model that was built then (``qkv.models.saved_configs``)."""
    _MODELS[name] = (config_class, model_class)
    if upgrade is not None:
        _UPGRADES[name] = upgrade


def saved_config_upgrade(name: str) -> Upgrade | None:
    """The upgrade of saved configs registered for ``name`` (None: its configs read as they
    are)."""
    return _UPGRADES.get(name)


def available_models() -> list[str]:
    """The names of the registered model types, sorted (``register_model`` adds one)."""
    return sorted(_MODELS)


def model_classes(name: str) -> tuple[type, type[nn.Module]]:
    """The config class and the model class registered as ``name``."""
    if name not in _MODELS:
        raise ValueError(f"unknown model type {name!r}; known: {available_models()}")
    return _MODELS[name]


def build_model(name: str, config: dict[str, Any] | Any) -> nn.Module:
    """Build a registered model from its config (a dataclass or a dict of its fields)."""
    config_class, model_class = model_classes(name)
    if isinstance(config, dict):
        known = {f.name for f in dataclasses.fields(config_class)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(
                f"config for {name!r} has unknown fields {unknown}; expected some of {sorted(known)}"
            )
        config = config_class(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        )
    if not isinstance(config, config_class):
        raise TypeError(
            f"model {name!r} needs a {config_class.__name__}, got {type(config).__name__}"
        )
    return model_class(config)


def model_type_of(model: nn.Module) -> str:
    """The registered name of a model's class."""
    for name, (_, model_class) in _MODELS.items():
        if type(model) is model_class:
            return name
    raise ValueError(f"{type(model).__name__} is not a registered model; call register_model first")


def config_to_dict(config: Any) -> dict[str, Any]:
    """A frozen config dataclass as plain JSON-able fields."""
    return dataclasses.asdict(config)
