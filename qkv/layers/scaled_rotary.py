"""Rotary embeddings with a configurable base and scaling rule (Llama, Qwen2, Mistral).

:class:`~qkv.layers.RotaryEmbedding` is plain RoPE with ``base`` 10000; checkpoints of the
Llama family set their own ``rope_theta`` and often a scaling rule
(:mod:`qkv.functional.rope_scaling`).  This component implements the same
:class:`~qkv.layers.attention_positions.AttentionPositions` protocol, so
``MultiHeadAttention(positions=ScaledRotaryEmbedding(...))`` rotates queries and keys after
its projections and before its KV cache, exactly as with plain RoPE.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.positions import apply_rotary
from qkv.functional.rope_scaling import RopeScaling, rope_inverse_frequency, rotary_tables

from .attention_positions import AttentionPositions

__all__ = ["ScaledRotaryEmbedding"]


class ScaledRotaryEmbedding(nn.Module, AttentionPositions):
    """RoPE with inverse frequencies from ``rope_inverse_frequency(head_dim, base, scaling)``.

    ``rotate(x, start=p)`` rotates (B, H, T, Dh) vectors at positions ``p .. p + T - 1``;
    ``bias`` is None.  The cos/sin tables of the first ``max_len`` positions are computed
    once (float64, kept as float32 non-persistent buffers); other positions are computed on
    the fly.  With "dynamic" scaling the frequencies depend on the length read so far,
    ``p + T``: a call reading positions past ``original_max_len`` rotates its vectors with
    the frequencies of that length, and keys already in a KV cache keep the rotation they
    were given (as Hugging Face's dynamic RoPE does during generation).  So cached decoding
    depends on how a prompt longer than ``original_max_len`` is split into calls:
    :func:`qkv.decoding.sample` reads all but its last token first, where transformers'
    ``generate`` reads it whole.

    Shapes: x (B, H, T, Dh) -> (B, H, T, Dh).
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        scaling: RopeScaling | None = None,
        max_len: int = 4096,
    ):
        super().__init__()
        self.head_dim = head_dim
        self.base = base
        self.scaling = scaling or RopeScaling()
        frequency = rope_inverse_frequency(head_dim, base=base, scaling=self.scaling)
        table_len = max_len
        if self.scaling.depends_on_length:  # the plain tables hold only up to original_max_len
            table_len = min(max_len, self.scaling.original_max_len)
        cos, sin = rotary_tables(frequency, table_len)
        self.register_buffer("cos_table", cos, persistent=False)  # (table_len, Dh)
        self.register_buffer("sin_table", sin, persistent=False)  # (table_len, Dh)

    def rotate(self, x: Tensor, *, start: int) -> Tensor:
        """Shapes: x (B, H, T, Dh) at positions start..start+T-1 -> (B, H, T, Dh)."""
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[-1] != self.head_dim:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise InputError(f"x must be (B, H, T, {self.head_dim}), got {shape}")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise InputError(f"start={start!r} must be a non-negative integer (the first position)")
        length = x.shape[2]
        end = start + length
        if end <= self.cos_table.shape[0] and x.dtype != torch.float64:
            cos, sin = self.cos_table[start:end], self.sin_table[start:end]
        else:
            frequency = rope_inverse_frequency(
                self.head_dim, base=self.base, scaling=self.scaling, length=end
            )
            cos, sin = rotary_tables(
                frequency, length, offset=start, device=x.device, dtype=x.dtype
            )
        return apply_rotary(x, cos, sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, scaling={self.scaling.kind!r}"
