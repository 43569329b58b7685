"""Scaled rotary frequencies: how Llama-family checkpoints stretch RoPE past their training length.

Plain RoPE rotates channel pair ``i`` of a head of width ``Dh`` by ``p * w_i`` at position
``p``, with inverse frequencies ``w_i = base^(-2i/Dh)``.  Checkpoints trained on longer
contexts than their base model change the ``w_i`` (``rope_scaling`` / ``rope_parameters`` in a
Hugging Face ``config.json``):

- "default": the ``w_i`` above.
- "linear" (position interpolation, Chen et al. 2023): ``w_i / factor``, i.e. positions
  squeezed by ``factor``.
- "dynamic" (NTK-aware, dynamic): up to ``original_max_len`` positions the plain ``w_i``; a
  sequence of ``L > original_max_len`` positions uses the base
  ``base * (factor * L / original_max_len - (factor - 1)) ** (Dh / (Dh - 2))``, so the
  frequencies depend on the length read so far.
- "llama3" (Llama 3.1): wavelengths ``2 pi / w_i`` shorter than
  ``original_max_len / high_freq_factor`` are kept, longer than
  ``original_max_len / low_freq_factor`` are divided by ``factor``, and those between are
  interpolated smoothly between the two.

A new rule is a function and one entry of :data:`ROPE_SCALING_RULES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from qkv.errors import InputError

__all__ = ["RopeScaling", "ROPE_SCALING_RULES", "rope_inverse_frequency", "rotary_tables"]


@dataclass(frozen=True)
class RopeScaling:
    """One RoPE scaling rule and its numbers.

    kind: a key of :data:`ROPE_SCALING_RULES` ("default", "linear", "dynamic", "llama3").
    factor: how much longer the context is made (linear, dynamic, llama3).
    low_freq_factor, high_freq_factor: llama3's wavelength thresholds.
    original_max_len: the context the base model was trained on (dynamic, llama3).
    """

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_len: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALING_RULES:
            raise InputError(
                f"RoPE scaling {self.kind!r} is not supported; supported: "
                f"{sorted(ROPE_SCALING_RULES)}"
            )
        if not self.factor > 0:
            raise InputError(f"RoPE scaling factor={self.factor} must be > 0")
        needs_length = self.kind in ("dynamic", "llama3")
        if needs_length and not (
            isinstance(self.original_max_len, int) and self.original_max_len > 0
        ):
            raise InputError(
                f"RoPE scaling {self.kind!r} needs original_max_len, the base model's context "
                f"length, as a positive integer; got {self.original_max_len!r}"
            )
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise InputError(
                f"llama3 RoPE scaling needs high_freq_factor > low_freq_factor > 0, got "
                f"{self.high_freq_factor} and {self.low_freq_factor}"
            )

    @property
    def depends_on_length(self) -> bool:
        """True when the frequencies change with the sequence length (dynamic)."""
        return self.kind == "dynamic"


def _plain(head_dim: int, base: float) -> Tensor:
    even = torch.arange(0, head_dim, 2, dtype=torch.float64)
    return base ** (-even / head_dim)  # (Dh/2,)


def _default(head_dim: int, base: float, scaling: RopeScaling, length: int) -> Tensor:
    return _plain(head_dim, base)


def _linear(head_dim: int, base: float, scaling: RopeScaling, length: int) -> Tensor:
    return _plain(head_dim, base) / scaling.factor


def _dynamic(head_dim: int, base: float, scaling: RopeScaling, length: int) -> Tensor:
    original = scaling.original_max_len
    if length <= original:
        return _plain(head_dim, base)
    stretch = scaling.factor * length / original - (scaling.factor - 1)
    return _plain(head_dim, base * stretch ** (head_dim / (head_dim - 2)))


def _llama3(head_dim: int, base: float, scaling: RopeScaling, length: int) -> Tensor:
    frequency = _plain(head_dim, base)
    wavelength = 2 * math.pi / frequency
    original = scaling.original_max_len
    # 0 for wavelengths past original / low_freq_factor (divided by factor), 1 for those below
    # original / high_freq_factor (kept), linear in original / wavelength between the two.
    keep = (original / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    keep = keep.clamp(0.0, 1.0)
    return (1 - keep) * frequency / scaling.factor + keep * frequency


#: kind -> (head_dim, base, scaling, sequence length) -> inverse frequencies (Dh/2,), float64.
ROPE_SCALING_RULES: dict[str, Callable[[int, float, RopeScaling, int], Tensor]] = {
    "default": _default,
    "linear": _linear,
    "dynamic": _dynamic,
    "llama3": _llama3,
}


def rope_inverse_frequency(
    head_dim: int, *, base: float = 10000.0, scaling: RopeScaling | None = None, length: int = 0
) -> Tensor:
    """The inverse frequencies ``w_i`` of RoPE under ``scaling`` for a sequence of ``length``
    positions (only "dynamic" reads it).  Shapes: -> (Dh/2,), float64 on the CPU."""
    if head_dim < 2 or head_dim % 2:
        raise InputError(f"RoPE needs an even head_dim >= 2, got {head_dim}")
    if not base > 0:
        raise InputError(f"RoPE base (rope_theta) = {base} must be > 0")
    scaling = scaling or RopeScaling()
    return ROPE_SCALING_RULES[scaling.kind](head_dim, float(base), scaling, length)


def rotary_tables(
    inverse_frequency: Tensor,
    length: int,
    *,
    offset: int = 0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """cos, sin of the angles ``p * w_i`` for positions ``offset .. offset + length - 1``, each
    angle twice (the half-split layout of :func:`qkv.functional.positions.apply_rotary`).
    Computed in float64 on the CPU, then moved.  Shapes: (Dh/2,) -> cos, sin (T, Dh)."""
    positions = torch.arange(offset, offset + length, dtype=torch.float64)
    angles = positions[:, None] * inverse_frequency.to(torch.float64)  # (T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, Dh)
    return angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype)
