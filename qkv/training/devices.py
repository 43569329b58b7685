"""Device names, read once: what ``--device`` (or a ``device=`` argument) may say on this
machine, and one line naming what the machine has when it says something else.

``parse_device`` is what every command and every loader of a checkpoint goes through, so
``gpu`` (a typo), ``cuda`` on a machine without a GPU, ``cuda:3`` on a machine with two and
``mps`` off a Mac are refused before anything is read, by name, instead of failing later
inside torch (where a missing accelerator reads like a corrupt file).
"""

from __future__ import annotations

import torch

from ..errors import InputError

__all__ = ["parse_device", "machine_devices"]

#: The kinds of device qkv runs on; torch knows more (meta, xla, ...), which qkv does not use.
KINDS = ("cpu", "cuda", "mps")


def machine_devices() -> str:
    """What this machine has, as a user would type it: "cpu", "cpu, cuda (2 GPUs: cuda:0,
    cuda:1)", "cpu, mps"."""
    found = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        names = ", ".join(f"cuda:{index}" for index in range(count))
        found.append(f"cuda ({count} GPU{'s' if count != 1 else ''}: {names})")
    if _mps_available():
        found.append("mps")
    return ", ".join(found)


def parse_device(name: str | torch.device) -> torch.device:
    """The torch device ``name`` means on this machine: "cpu", "cuda", "cuda:N", "mps", or
    "auto" (this machine's GPU when it has one, else the CPU).

    Raises InputError (field ``device``) naming what this machine has, for a name torch does
    not know, a kind qkv does not run on, or a device this machine lacks."""
    if isinstance(name, torch.device):
        device, text = name, str(name)
    elif isinstance(name, str):
        text = name.strip()
        if text == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(text)
        except RuntimeError:  # torch's list of every backend it was built to know
            device = None
    else:
        raise InputError(
            f"device={name!r} must be a device name such as 'cpu' or 'cuda'", fields=("device",)
        )
    if device is None or device.type not in KINDS:
        hint = " ('cuda' is the GPU)" if text.lower().startswith("gpu") else ""
        raise InputError(
            f"device={text!r} is not a device qkv runs on{hint}; use cpu, cuda, cuda:N, mps "
            f"or auto (this machine has: {machine_devices()})",
            fields=("device",),
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"device={text!r} but this machine has no CUDA GPU that torch can use (it has: "
                f"{machine_devices()}); use --device cpu",
                fields=("device",),
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise InputError(
                f"device={text!r} but this machine has {count} GPU{'s' if count != 1 else ''} "
                f"(it has: {machine_devices()})",
                fields=("device",),
            )
    if device.type == "mps" and not _mps_available():
        raise InputError(
            f"device={text!r} but this machine has no MPS (Apple GPU) that torch can use "
            f"(it has: {machine_devices()})",
            fields=("device",),
        )
    return device


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())
