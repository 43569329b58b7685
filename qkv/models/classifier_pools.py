"""The registry of the classifiers' pools: many vectors -> one (an image's regions -> a
picture vector, a clip's frames -> a clip vector), chosen by name as scores and positions are.

Every pool is a module ``pool(vectors (B, T, D), mask (B, T) bool or None)`` ->
:class:`Pooled` (vector (B, D), weights (B, 1, T) or None: what it attended, for the
explorer).  ``ClassifierConfig.region_pool`` names one for the regions (only pools that do
not read an order: regions have none), ``ClassifierConfig.pool`` one for the frames.

``attribute``: the model attribute a pool's weights live under -- the names checkpoints
were written with ("pooling" for the attention query, "recurrent" for the GRU) -- so saved
classifiers keep loading.  A new pool is a module and one :func:`register_pool` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.layers import AttentionPooling

__all__ = [
    "Pooled",
    "PoolKind",
    "register_pool",
    "pool_kind",
    "available_pools",
    "MeanPool",
    "AttentionPool",
    "LastStatePool",
]


class Pooled(NamedTuple):
    """vector: (B, D).  weights: (B, 1, T) the pool's weights over the items, or None."""

    vector: Tensor
    weights: Tensor | None


@dataclass(frozen=True)
class PoolKind:
    """A registered pool: ``build(width)`` makes it; ``ordered``: it reads the items in order
    (so it pools frames, never regions); ``attribute``: where a model keeps it."""

    name: str
    build: Callable[[int], nn.Module]
    ordered: bool = False
    attribute: str = "pooling"


_POOLS: dict[str, PoolKind] = {}


def register_pool(kind: PoolKind) -> PoolKind:
    _POOLS[kind.name] = kind
    return kind


def available_pools(*, ordered: bool = True) -> tuple[str, ...]:
    """Pool names in registration order; ``ordered=False`` leaves out those that read an
    order (for an image's regions)."""
    return tuple(name for name, kind in _POOLS.items() if ordered or not kind.ordered)


def pool_kind(name: str, *, ordered: bool = True, field: str = "pool") -> PoolKind:
    """The pool called ``name``; InputError naming ``field`` and the choices otherwise."""
    choices = available_pools(ordered=ordered)
    if name not in choices:
        raise InputError(f"{field}={name!r} must be one of {choices}")
    return _POOLS[name]


class MeanPool(nn.Module):
    """The plain mean of the items that are real (all of them without a mask)."""

    def forward(self, vectors: Tensor, mask: Tensor | None = None) -> Pooled:
        if mask is None:
            return Pooled(vectors.mean(dim=1), None)  # (B, D)
        weights = mask.to(vectors.dtype) / mask.sum(dim=1, keepdim=True).clamp(min=1)
        return Pooled((weights.unsqueeze(-1) * vectors).sum(dim=1), None)  # (B, D)


class AttentionPool(AttentionPooling):
    """One learned query's weighted mean of the items (:class:`AttentionPooling`)."""

    def forward(self, vectors: Tensor, mask: Tensor | None = None) -> Pooled:  # type: ignore[override]
        pooled = super().forward(vectors, mask=mask)
        return Pooled(pooled.pooled[:, 0], pooled.weights)  # (B, D), (B, 1, T)


class LastStatePool(nn.GRU):
    """A GRU over the items; its state after the last real one (padding comes after)."""

    def __init__(self, width: int):
        super().__init__(width, width, batch_first=True)

    def forward(self, vectors: Tensor, mask: Tensor | None = None) -> Pooled:  # type: ignore[override]
        states, _ = super().forward(vectors)  # (B, T, D)
        if mask is None:
            return Pooled(states[:, -1], None)
        last = mask.sum(dim=1) - 1  # (B,)
        return Pooled(states[torch.arange(len(states), device=states.device), last], None)


register_pool(PoolKind("attention", AttentionPool))
register_pool(PoolKind("mean", lambda width: MeanPool()))
register_pool(PoolKind("last", LastStatePool, ordered=True, attribute="recurrent"))
