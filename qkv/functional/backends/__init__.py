"""A small registry of attention backends behind :func:`qkv.functional.attention`.

Each backend computes the same thing -- softmax(scale * Q K^T, masked) V -- and says for a
given call either that it can serve it or *why not*.  ``backend="auto"`` walks the
registry in priority order (fastest first) and takes the first that can.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from torch import Tensor

from ...errors import InputError
from ..checks import check_call
from ..heads import repeat_kv
from ..scores import resolve_scale

__all__ = [
    "AttentionCall",
    "make_call",
    "AttentionOutput",
    "Backend",
    "BackendChoice",
    "register_backend",
    "get_backend",
    "available_backends",
    "choose_backend",
    "run_backend",
]


class AttentionOutput(NamedTuple):
    """What :func:`qkv.functional.attention` returns.

    output: (B, H, Tq, Dv).  weights: (B, H, Tq, Tk), or None unless asked for.
    """

    output: Tensor
    weights: Tensor | None


class AttentionCall(NamedTuple):
    """One validated call, as every backend receives it.

    query (B, H, Tq, Dh); key (B, Hkv, Tk, Dh); value (B, Hkv, Tk, Dv), Hkv dividing H --
    grouped key/value heads as the caller passed them.  A backend that declares
    ``grouped_heads = True`` takes them so; :func:`run_backend` hands every other backend the
    call with its heads repeated to H (:meth:`repeated_heads`).  mask: None, boolean (True = may attend) or a float additive bias, in
    the query's dtype, broadcastable to (B, H, Tq, Tk).  causal: the end-aligned causal
    mask applies on top of ``mask``.  scale: the factor on q.k.  dropout: probability on the
    weights.  need_weights: the caller wants the (B, H, Tq, Tk) weights back.
    """

    query: Tensor
    key: Tensor
    value: Tensor
    mask: Tensor | None
    causal: bool
    scale: float
    dropout: float
    need_weights: bool

    def repeated_heads(self) -> AttentionCall:
        """The call with each key/value head repeated for the query heads it serves:
        key (B, H, Tk, Dh), value (B, H, Tk, Dv).  A copy in memory when Hkv < H."""
        heads, kv_heads = self.query.shape[1], self.key.shape[1]
        if heads == kv_heads:
            return self
        repeats = heads // kv_heads
        return self._replace(key=repeat_kv(self.key, repeats), value=repeat_kv(self.value, repeats))


def make_call(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    causal: bool,
    score: str,
    scale: float | None,
    dropout: float,
    need_weights: bool,
) -> AttentionCall:
    """Check one call's arguments (tensors, mask, causal alignment, dropout, score) and give
    it as every backend receives it: the score as a factor, grouped key/value heads kept
    (:func:`run_backend` repeats them for the backends that need one per query head)."""
    mask = check_call(query, key, value, mask, causal)
    if not 0.0 <= dropout < 1.0:
        raise InputError(f"dropout={dropout} must be in [0, 1)")
    scale = resolve_scale(score, scale, query.shape[-1])
    return AttentionCall(
        query, key, value, mask, bool(causal), scale, float(dropout), bool(need_weights)
    )


class Backend(Protocol):
    name: str
    #: True: ``run`` takes grouped key/value heads (Hkv < H) as they are.  Optional; a
    #: backend without it gets them repeated to H.
    grouped_heads: bool

    def unsupported(self, call: AttentionCall) -> str | None:
        """None if this backend can serve ``call``; otherwise the reason it cannot."""

    def run(self, call: AttentionCall) -> AttentionOutput: ...


def run_backend(backend: Backend, call: AttentionCall) -> AttentionOutput:
    """``backend.run(call)``, the key/value heads repeated to H unless the backend takes
    grouped heads as they are."""
    if not getattr(backend, "grouped_heads", False):
        call = call.repeated_heads()
    return backend.run(call)


_REGISTRY: dict[str, tuple[int, Backend]] = {}
_ORDER: list[Backend] = []  # the registry sorted by priority, kept beside it for "auto"


def register_backend(backend: Backend, *, priority: int) -> Backend:
    """Add (or replace) a backend.  Lower priority numbers are tried first by "auto"."""
    _REGISTRY[backend.name] = (priority, backend)
    _ORDER[:] = [b for _, b in sorted(_REGISTRY.values(), key=lambda entry: entry[0])]
    return backend


def get_backend(name: str) -> Backend:
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown attention backend {name!r}; choose from {available_backends()} or 'auto'"
        )
    return _REGISTRY[name][1]


def available_backends() -> list[str]:
    """Backend names in the order "auto" tries them."""
    return [backend.name for backend in _ORDER]


@dataclass(frozen=True)
class BackendChoice:
    """The backend a call goes to, why each faster one was passed over, and -- where a
    backend has more than one -- the engine that computes it on this device."""

    backend: str
    passed_over: dict[str, str] = field(default_factory=dict)
    engine: str | None = None

    def __str__(self) -> str:
        lines = [f"backend: {self.backend}"]
        lines += [f"  engine: {self.engine}"] if self.engine else []
        lines += [f"  not {name}: {why}" for name, why in self.passed_over.items()]
        return "\n".join(lines)


def choose_backend(call: AttentionCall, requested: str = "auto") -> tuple[Backend, BackendChoice]:
    if requested != "auto":
        backend = get_backend(requested)
        why = backend.unsupported(call)
        if why is not None:
            raise ValueError(f"attention backend {requested!r} cannot serve this call: {why}")
        return backend, BackendChoice(requested)
    passed_over: dict[str, str] = {}
    for backend in _ORDER:
        why = backend.unsupported(call)
        if why is None:
            return backend, BackendChoice(backend.name, passed_over)
        passed_over[backend.name] = why
    raise ValueError(f"no attention backend can serve this call: {passed_over}")
