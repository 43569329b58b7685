"""Key/value caches for incremental decoding, and the protocol both kinds share."""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..errors import InputError

__all__ = ["AttentionCache", "KVCache", "RollingKVCache", "StaticKV"]


@runtime_checkable
class AttentionCache(Protocol):
    """What :class:`~qkv.layers.MultiHeadAttention` asks of a ``cache``.

    ``appends``: True for a cache the layer adds each call's keys/values to, with
    ``append(key, value) -> (all keys, all values)`` (self-attention decoding,
    :class:`KVCache`); False for one that already holds every key and value (cross-attention
    over fixed memory, :class:`StaticKV`).  ``length``: positions consumed (the next new
    position); ``first``: the position of the oldest key held (0 unless a
    :class:`RollingKVCache` dropped older ones).  key (B, Hkv, length - first, Dh), value
    (B, Hkv, length - first, Dv)."""

    appends: bool
    first: int

    @property
    def length(self) -> int:
        """How many key/value positions the cache has consumed."""

    @property
    def key(self) -> Tensor | None:
        """The cached keys (B, Hkv, Tk, Dh), or None while empty."""

    @property
    def value(self) -> Tensor | None:
        """The cached values (B, Hkv, Tk, Dv), or None while empty."""


class StaticKV(NamedTuple):
    """Keys and values computed once and reused at every step (cross-attention over an
    encoder's output).  key (B, Hkv, S, Dh), value (B, Hkv, S, Dv)."""

    key: Tensor
    value: Tensor

    appends = False  # an AttentionCache that holds every key and value
    first = 0

    @property
    def length(self) -> int:
        """How many key positions the projected memory has (Tk)."""
        return self.key.shape[2]


class KVCache:
    """The keys and values of every position decoded so far, for one attention layer.

    ``append`` writes the new step's keys/values into a preallocated buffer that doubles
    when full, so a step costs O(1) copies, not a concatenation of the whole prefix.
    Shapes: key (B, Hkv, T, Dh), value (B, Hkv, T, Dv).
    """

    appends = True  # an AttentionCache the layer adds each call's keys and values to
    first = 0  # every position is kept

    def __init__(self) -> None:
        self._key: Tensor | None = None
        self._value: Tensor | None = None
        self.length = 0

    @property
    def key(self) -> Tensor | None:
        """The keys appended so far (B, Hkv, length, Dh), or None before the first call."""
        return None if self._key is None else self._key[:, :, : self.length]

    @property
    def value(self) -> Tensor | None:
        """The values appended so far (B, Hkv, length, Dv), or None before the first call."""
        return None if self._value is None else self._value[:, :, : self.length]

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions (B, Hkv, t, D); return all keys and values so far."""
        new = key.shape[2]
        if self._key is None:
            capacity = max(16, 2 * new)
            self._key = key.new_empty(key.shape[:2] + (capacity, key.shape[3]))
            self._value = value.new_empty(value.shape[:2] + (capacity, value.shape[3]))
        elif key.shape[:2] != self._key.shape[:2] or key.shape[3] != self._key.shape[3]:
            raise InputError(
                f"cache holds keys of shape (B, Hkv, T, Dh) = {tuple(self._key.shape[:2])} + "
                f"(T, {self._key.shape[3]}), cannot append {tuple(key.shape)}"
            )
        if self.length + new > self._key.shape[2]:
            capacity = max(2 * self._key.shape[2], self.length + new)
            self._key = _grow(self._key, capacity, self.length)
            self._value = _grow(self._value, capacity, self.length)
        self._key[:, :, self.length : self.length + new] = key
        self._value[:, :, self.length : self.length + new] = value
        self.length += new
        return self.key, self.value

    def select(self, indices: Tensor) -> KVCache:
        """A new cache holding batch rows ``indices`` (beam search reorders hypotheses)."""
        out = KVCache()
        if self._key is not None:
            out._key = self._key.index_select(0, indices)
            out._value = self._value.index_select(0, indices)
            out.length = self.length
        return out


class RollingKVCache:
    """The keys and values of the last ``window - 1`` positions only, for sliding-window
    attention (query i sees keys i - W + 1 .. i): older ones can never be attended again.

    ``append`` returns the kept keys followed by the new ones (positions ``first`` ..
    ``length + t - 1``), then keeps only the last ``window - 1`` of them, so what the cache
    holds between calls never exceeds W - 1 positions, however many are generated (a
    decoding step attends at most W keys: those and its own).  ``length`` counts every
    position consumed (positions, RoPE's rotations and ALiBi's distances stay absolute);
    ``first`` is the position of the oldest key held.
    Shapes: key (B, Hkv, length - first, Dh), value (B, Hkv, length - first, Dv).
    """

    appends = True

    def __init__(self, window: int) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InputError(f"RollingKVCache window={window!r} must be a positive int")
        self.window = window
        self.key: Tensor | None = None
        self.value: Tensor | None = None
        self.length = 0

    @property
    def first(self) -> int:
        """The position of the oldest key held (length - the positions held)."""
        return self.length - (0 if self.key is None else self.key.shape[2])

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add new positions (B, Hkv, t, D); return the held and new keys and values
        (positions first .. length + t - 1), then drop all but the last window - 1."""
        if self.key is not None:
            if key.shape[:2] != self.key.shape[:2] or key.shape[3] != self.key.shape[3]:
                raise InputError(
                    f"cache holds keys of shape (B, Hkv, T, Dh) = {tuple(self.key.shape[:2])}"
                    f" + (T, {self.key.shape[3]}), cannot append {tuple(key.shape)}"
                )
        self.length += key.shape[2]
        if self.key is not None:
            key = torch.cat([self.key, key], dim=2)
            value = torch.cat([self.value, value], dim=2)
        keep = min(self.window - 1, key.shape[2])
        # clone: a view would keep the whole (prefix-long) concatenation alive
        self.key = key[:, :, key.shape[2] - keep :].clone()
        self.value = value[:, :, value.shape[2] - keep :].clone()
        return key, value

    def select(self, indices: Tensor) -> RollingKVCache:
        """A new cache holding batch rows ``indices`` (beam search reorders hypotheses)."""
        out = RollingKVCache(self.window)
        if self.key is not None:
            out.key = self.key.index_select(0, indices)
            out.value = self.value.index_select(0, indices)
        out.length = self.length
        return out


def _grow(buffer: Tensor, capacity: int, length: int) -> Tensor:
    bigger = buffer.new_empty(buffer.shape[:2] + (capacity, buffer.shape[3]))
    bigger[:, :, :length] = buffer[:, :, :length]
    return bigger
