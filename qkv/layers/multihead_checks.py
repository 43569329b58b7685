"""The input checks of :class:`~qkv.layers.multihead.MultiHeadAttention`: the shapes of
query, key and value, the cache, and which calls its position scheme applies to."""

from __future__ import annotations

from torch import Tensor

from ..errors import InputError
from .cache import AttentionCache

__all__ = ["MultiHeadInputChecks"]


class MultiHeadInputChecks:
    """Checks a ``MultiHeadAttention`` runs before projecting: each raises early, naming the
    shape it got and the one it needs (the layer sets ``d_model``, ``kdim``, ``vdim`` and
    ``positions``)."""

    def _check_inputs(self, query, key, value, cache) -> None:
        if query.dim() != 3 or query.shape[-1] != self.d_model:
            raise InputError(f"query must be (B, Tq, {self.d_model}), got {tuple(query.shape)}")
        if key is None and value is not None:
            raise InputError("pass value together with key (or neither, for self-attention)")
        if cache is not None and not isinstance(cache, AttentionCache):
            raise TypeError(f"cache must be a KVCache or StaticKV, got {type(cache).__name__}")
        fixed_memory = cache is not None and not cache.appends
        if fixed_memory and key is not None:
            raise InputError("a StaticKV cache already holds the keys/values: omit key and value")
        if key is not None:
            self._check_widths(key, key if value is None else value, batch=query.shape[0])
        elif not fixed_memory and (self.kdim, self.vdim) != (self.d_model,) * 2:
            raise InputError(
                f"self-attention (key and value omitted) needs kdim = vdim = d_model = "
                f"{self.d_model}; this layer has kdim={self.kdim}, vdim={self.vdim}: pass key and value"
            )
        if self.positions is not None and (key is not None or fixed_memory):
            raise InputError(
                f"positions={type(self.positions).__name__} applies to self-attention only; "
                "this call is cross-attention (key/value or a StaticKV cache given): "
                "use a layer without positions for cross-attention"
            )

    def _check_widths(self, key: Tensor, value: Tensor, batch: int | None = None) -> None:
        if key.dim() != 3 or key.shape[-1] != self.kdim:
            raise InputError(f"key must be (B, Tk, {self.kdim}), got {tuple(key.shape)}")
        if value.dim() != 3 or value.shape[-1] != self.vdim or value.shape[:2] != key.shape[:2]:
            raise InputError(
                f"value must be (B, Tk, {self.vdim}) matching key {tuple(key.shape)}, got {tuple(value.shape)}"
            )
        if batch is not None and key.shape[0] != batch:
            raise InputError(f"query batch {batch} != key batch {key.shape[0]}")
