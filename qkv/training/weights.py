"""A model's weights in a safetensors file: written with tied tensors stored once, read only
after the file's header (names, shapes, dtypes) matches the model, so a file from elsewhere
never allocates more than the model it is loaded into.  safetensors holds tensors and text,
never code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from ..errors import CheckpointError
from ..layers.saved_formats import stack_legacy_projections
from ..models.registry import build_model
from .devices import parse_device

__all__ = [
    "weights_for_saving",
    "load_weights",
    "weight_shapes",
    "WeightsMismatchError",
    "count_parameters",
    "MAX_PARAMETERS",
]

#: The most parameters a checkpoint's config may ask for (40 GB of float32 weights): more is
#: taken for a corrupt or hostile config rather than a model.
MAX_PARAMETERS = 10**10


def weights_for_saving(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """What ``safetensors.torch.save_file`` writes: the tensors on CPU, each shared tensor
    (tied weights) once, and metadata naming the other names as aliases (safetensors
    refuses tensors that share memory)."""
    tensors, aliases = _tensors_for_saving(model)
    return tensors, {"aliases": _encode(aliases)}


def load_weights(
    model: nn.Module, directory: str | Path, *, map_location: str | torch.device = "cpu"
) -> None:
    """Copy a checkpoint's weights into ``model`` (moved to ``map_location``), after checking
    from the file's header that every tensor name and shape matches."""
    weights_file = Path(directory) / "model.safetensors"
    device = str(parse_device(map_location))
    header, aliases = _read_header(weights_file)
    _check_matches(model, header, weights_file)
    try:
        stored = load_file(str(weights_file), device=device)
    except Exception as error:
        raise _corrupt(weights_file, error) from None
    for alias, original in aliases.items():
        stored[alias] = stored[original]
    model.to(device)
    model.load_state_dict(stored, strict=True)


def weight_shapes(directory: str | Path) -> dict[str, tuple[int, ...]]:
    """Every tensor name of a checkpoint's weights and its shape, from the file's header
    (no tensor is read)."""
    return _read_header(Path(directory) / "model.safetensors")[0]


def _read_header(weights_file: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """(name -> shape, tied aliases included; alias -> original name)."""
    if not weights_file.is_file():
        raise CheckpointError(f"checkpoint weights {weights_file} are missing")
    try:
        with safe_open(str(weights_file), framework="pt") as handle:
            text = (handle.metadata() or {}).get("aliases", "")
            header = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
        aliases = dict(entry.split("=", 1) for entry in text.split(";") if entry)
        for alias, original in aliases.items():
            header[alias] = header[original]
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise _corrupt(weights_file, error) from None
    return header, aliases


def count_parameters(model_type: str, model_config: dict[str, Any]) -> int:
    """The parameter count of the model a config describes, built on the meta device (no
    memory for weights, no random numbers drawn): a config is checked before it allocates."""
    try:
        with torch.device("meta"):
            model = build_model(model_type, model_config)
    except RuntimeError as error:
        if "overflow" not in str(error):
            raise
        raise CheckpointError(  # a tensor of more than 2^63 bytes
            f"the {model_type!r} config asks for tensors too large to exist "
            f"({str(error).splitlines()[0]}); it is corrupt or not a qkv checkpoint"
        ) from None
    return sum(tensor.numel() for tensor in model.state_dict().values())


def _corrupt(weights_file: Path, error: Exception) -> CheckpointError:
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    return CheckpointError(f"checkpoint weights {weights_file} are corrupt ({message})")


def _tensors_for_saving(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, tensor in model.state_dict().items():
        key = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.dtype,
        )
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = tensor.detach().to("cpu").contiguous().clone()
    return tensors, aliases


def _encode(aliases: dict[str, str]) -> str:
    return ";".join(f"{alias}={original}" for alias, original in aliases.items())


class WeightsMismatchError(CheckpointError):
    """A checkpoint's tensor names or shapes are not those of the model its config builds."""


def _check_matches(model: nn.Module, found: dict[str, tuple], weights_file: Path) -> None:
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for name in expected:  # older checkpoints: attention's Q, K, V as three Linears
        if name.endswith("in_proj_weight"):
            stack_legacy_projections(found, name.removesuffix("in_proj_weight"))
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    mismatched = [
        f"{name} {found[name]} in the file vs {expected[name]} in the model"
        for name in sorted(set(expected) & set(found))
        if expected[name] != found[name]
    ]
    problems = []
    if mismatched:
        problems.append("shape mismatch: " + "; ".join(mismatched[:3]))
    if missing:
        problems.append(f"missing tensors {missing[:3]}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected[:3]}")
    if problems:
        raise WeightsMismatchError(
            f"weights {weights_file} do not match the model config beside them: "
            + ", ".join(problems)
        )
