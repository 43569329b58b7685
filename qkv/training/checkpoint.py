"""Checkpoints: what a run leaves behind, written so that a crash never corrupts one.

A run directory looks like::

    out_dir/
      log.jsonl
      last.json                  {"checkpoint": "checkpoints/step-000120", "step": 120}
      best.json                  {"checkpoint": "checkpoints/step-000100", "step": 100, ...}
      checkpoints/step-000120/
        model.safetensors        the weights
        config.json              {"model_type", "model", "metadata", "tokenizers", "step", ...}
        tokenizer_<name>.json    one per tokenizer (e.g. source, target)
        trainer_state.pt         optimizer, schedule, position, RNG states (for resume)

A checkpoint directory is written whole under a temporary name and renamed into place; only
then do the pointer files move to it (each replaced atomically), and only then are older
directories pruned.  So ``last.json`` / ``best.json`` always name a complete checkpoint, and
a write that fails (a full disk: RunError naming it) leaves the previous one as it was.

Loading never runs code from the files: weights are safetensors, configs and pointers JSON,
the trainer state ``torch.load(weights_only=True)``; a config is sized on the meta device
before its model is built, and the weights' header is checked before they are read.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from .._version import __version__
from ..errors import CheckpointError
from ..models.registry import build_model, config_to_dict, model_type_of
from ..models.saved_configs import upgrade_saved_config
from .devices import parse_device
from .files import disk_errors, fsync_directory, fsync_tree, read_json, write_json_atomic
from .weights import (
    MAX_PARAMETERS,
    count_parameters,
    load_weights,
    weight_shapes,
    weights_for_saving,
)

__all__ = [
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_model_type",
    "load_weights",
    "load_trainer_state",
    "read_pointer",
    "resolve_checkpoint",
    "WEIGHTS_FILE",
    "CONFIG_FILE",
    "TRAINER_STATE_FILE",
]

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TRAINER_STATE_FILE = "trainer_state.pt"
CHECKPOINTS = "checkpoints"


@dataclass
class Checkpoint:
    """A loaded checkpoint.  ``model`` is in eval mode on ``map_location``; ``config`` is its
    frozen config dataclass (``model.config``)."""

    model: nn.Module
    model_type: str
    config: Any
    metadata: dict[str, Any]
    tokenizers: dict[str, Any]
    directory: Path
    step: int | None = None


def save_checkpoint(
    out_dir: str | Path,
    model: nn.Module,
    *,
    step: int,
    metadata: Mapping[str, Any] | None = None,
    tokenizers: Mapping[str, Any] | None = None,
    trainer_state: dict[str, Any] | None = None,
    best: dict[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/checkpoints/step-<step>/`` whole, then point ``last.json`` at it (and
    ``best.json`` when ``best`` is given: extra fields such as the metric and its value),
    then delete step directories that neither pointer names.  Returns the new directory."""
    out_dir = Path(out_dir)
    parent = out_dir / CHECKPOINTS
    parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(parent)
    final = parent / f"step-{step:06d}"
    if final.exists():
        if final.resolve() in _pointed_to(out_dir):
            raise CheckpointError(f"refusing to overwrite {final}: a pointer in {out_dir} names it")
        shutil.rmtree(final)  # complete but unnamed: a crash hit between rename and pointer
    temporary = parent / f".tmp-step-{step:06d}-{os.getpid()}"
    with disk_errors(out_dir, what=f"checkpoint {final}"):
        try:
            _write_directory(temporary, model, step, metadata, tokenizers, trainer_state)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)  # give a full disk its space back
            raise
        os.replace(temporary, final)
        fsync_directory(parent)
        pointer = {"checkpoint": f"{CHECKPOINTS}/{final.name}", "step": step}
        # last first: a crash between the two leaves best naming an older checkpoint, never
        # best naming one that a resumed run (from last) would have to write again
        write_json_atomic(out_dir / "last.json", pointer)
        if best is not None:
            write_json_atomic(out_dir / "best.json", {**best, **pointer})
    _prune(out_dir)
    return final


def read_pointer(out_dir: str | Path, name: str) -> Path | None:
    """The checkpoint directory that ``out_dir/<name>.json`` names, or None if no pointer."""
    out_dir = Path(out_dir)
    pointer_file = out_dir / f"{name}.json"
    if not pointer_file.exists():
        return None
    pointer = read_json(pointer_file, what="checkpoint pointer")
    if not isinstance(pointer, dict) or not isinstance(pointer.get("checkpoint"), str):
        raise CheckpointError(f"checkpoint pointer {pointer_file} has no 'checkpoint' entry")
    directory = out_dir / pointer["checkpoint"]
    if not (directory / CONFIG_FILE).is_file():
        raise CheckpointError(f"{pointer_file} names {directory}, which is not a checkpoint")
    return directory


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory from a run directory (its best, else its last) or itself."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint path {path} does not exist or is not a directory")
    if (path / CONFIG_FILE).is_file():
        return path
    for name in ("best", "last"):
        directory = read_pointer(path, name)
        if directory is not None:
            return directory
    raise CheckpointError(
        f"{path} is neither a checkpoint (no {CONFIG_FILE}) nor a run directory "
        "(no best.json or last.json)"
    )


def checkpoint_model_type(path: str | Path) -> str:
    """The model type a checkpoint holds (read from its config, without loading weights)."""
    directory = resolve_checkpoint(path)
    config = read_json(directory / CONFIG_FILE, what="checkpoint config")
    if "model_type" not in config:
        raise CheckpointError(
            f"checkpoint config {directory / CONFIG_FILE} has no 'model_type' entry"
        )
    return str(config["model_type"])


def load_checkpoint(
    path: str | Path,
    *,
    map_location: str | torch.device = "cpu",
    expect_type: str | None = None,
    load_tokenizers: bool = True,
    max_parameters: int = MAX_PARAMETERS,
) -> Checkpoint:
    """Rebuild the model of a checkpoint (run directory or step directory) with its weights,
    metadata and tokenizers.  ``expect_type`` refuses a checkpoint of another model type;
    a config asking for more than ``max_parameters`` parameters is refused before anything
    is allocated."""
    map_location = parse_device(map_location)  # a device this machine lacks: before reading
    directory = resolve_checkpoint(path)
    config = read_json(directory / CONFIG_FILE, what="checkpoint config")
    for key in ("model_type", "model"):
        if key not in config:
            raise CheckpointError(
                f"checkpoint config {directory / CONFIG_FILE} has no {key!r} entry"
            )
    model_type = config["model_type"]
    if expect_type is not None and model_type != expect_type:
        raise CheckpointError(
            f"{directory} holds a {model_type!r} model, not the {expect_type!r} expected"
        )
    # a config written before one of its defaults changed meaning: built as it was then
    config["model"] = upgrade_saved_config(model_type, config["model"], weight_shapes(directory))
    try:
        size = count_parameters(model_type, config["model"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"cannot rebuild the model of {directory / CONFIG_FILE}: {error}"
        ) from None
    if size > max_parameters:
        raise CheckpointError(
            f"{directory / CONFIG_FILE} asks for a {model_type!r} model of {size:.3g} "
            f"parameters, more than the {max_parameters:.3g} allowed; the config is corrupt or "
            "not a qkv checkpoint (pass max_parameters to load a model that large)"
        )
    model = build_model(model_type, config["model"])
    load_weights(model, directory, map_location=map_location)
    model.eval()
    tokenizers = {}
    if load_tokenizers and config.get("tokenizers"):
        from ..data.tokenizers import load_tokenizer  # pulls in HF tokenizers: only when needed

        for name, file_name in config["tokenizers"].items():
            tokenizers[name] = load_tokenizer(directory / file_name)
    return Checkpoint(
        model=model,
        model_type=model_type,
        config=model.config,
        metadata=config.get("metadata", {}),
        tokenizers=tokenizers,
        directory=directory,
        step=config.get("step"),
    )


def load_trainer_state(directory: str | Path, *, map_location: str | torch.device = "cpu") -> dict:
    state_file = Path(directory) / TRAINER_STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(
            f"trainer state {state_file} is missing; this checkpoint cannot resume"
        )
    try:
        return torch.load(state_file, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(f"trainer state {state_file} is corrupt ({error})") from None


def _write_directory(directory, model, step, metadata, tokenizers, trainer_state) -> None:

    directory.mkdir(parents=True)
    tensors, header_metadata = weights_for_saving(model)
    try:
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata=header_metadata)
    except Exception as error:  # safetensors reports I/O errors as its own type
        found = re.search(r"os error (\d+)", str(error))
        if found is None or isinstance(error, OSError):
            raise
        number = int(found.group(1))
        raise OSError(number, os.strerror(number), str(directory / WEIGHTS_FILE)) from error
    tokenizer_files = {}
    for name, tokenizer in (tokenizers or {}).items():
        tokenizer_files[name] = f"tokenizer_{name}.json"
        tokenizer.save(directory / tokenizer_files[name])
    config = {
        "model_type": model_type_of(model),
        "model": config_to_dict(model.config),
        "metadata": dict(metadata or {}),
        "tokenizers": tokenizer_files,
        "step": step,
        "qkv_version": __version__,
    }
    write_json_atomic(directory / CONFIG_FILE, config)
    if trainer_state is not None:
        torch.save(trainer_state, directory / TRAINER_STATE_FILE)
    fsync_tree(directory)


def _pointed_to(out_dir: Path) -> set[Path]:
    """The directories named by the pointers (raises if a pointer cannot be read)."""
    named = set()
    for name in ("last", "best"):
        directory = read_pointer(out_dir, name)
        if directory is not None:
            named.add(directory.resolve())
    return named


def _prune(out_dir: Path) -> None:
    try:
        keep = _pointed_to(out_dir)
    except ValueError:
        return  # an unreadable pointer: deleting nothing is the safe choice
    for directory in (out_dir / CHECKPOINTS).glob("step-*"):
        if directory.is_dir() and directory.resolve() not in keep:
            shutil.rmtree(directory, ignore_errors=True)


def _remove_leftovers(parent: Path) -> None:
    """Temporary directories of writes that crashed half-way."""
    for directory in parent.glob(".tmp-step-*"):
        shutil.rmtree(directory, ignore_errors=True)
