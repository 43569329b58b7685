"""The language model with each window spread over a context-parallel group (ring attention).

Each of the P ranks of ``group`` holds the zigzag part of every window
(:func:`qkv.distributed.shard_sequence` with ``causal=True``: chunks r and 2P-1-r of 2P).
It embeds its tokens at their *global* positions (learned and sinusoidal input positions,
RoPE's rotations, each contiguous run with its own offset), runs every block with its
self-attention replaced by :func:`qkv.distributed.ring_attention`, and returns the logits of
its own tokens.  Summed over the ranks, the losses and the gradients of the shared weights
are those of the whole window on one process.

Supported: positions learned, sinusoidal, rope; no attention dropout (ring attention has
none), so ``dropout=0``.  ALiBi would need a per-pair score bias inside the ring: refused.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.distributed import sequence_layout, shard_sequence
from qkv.distributed.layout import group_rank_and_size
from qkv.distributed.ring import ring_attention
from qkv.errors import InputError
from qkv.functional.heads import merge_heads

from .lm import LMOutput, TransformerLM

__all__ = ["ContextParallelLM"]

#: Position schemes whose every use takes a start offset, so a rank can place its runs.
SUPPORTED_POSITIONS = ("learned", "sinusoidal", "rope")


class ContextParallelLM(nn.Module):
    """``ContextParallelLM(lm, group)``: ``forward(source, target_input)`` with source (B, 0)
    and target_input (B, T) the *whole* window on every rank -> LMOutput with logits
    (B, T'/P, V) of this rank's tokens, T' = T padded up to a multiple of 2P (pads go last,
    where causal attention keeps them from every real token); :meth:`shard` cuts targets
    the same way.  Its parameters are the LM's own (train it, save ``lm``)."""

    def __init__(self, lm: TransformerLM, group: Any = None):
        super().__init__()
        config = lm.config
        if config.positions not in SUPPORTED_POSITIONS:
            raise InputError(
                f"context parallelism supports positions {SUPPORTED_POSITIONS}, not "
                f"{config.positions!r} (ALiBi's bias would have to be built per ring step)"
            )
        if config.dropout > 0:
            raise InputError(
                f"context parallelism needs dropout 0 (ring attention has no attention "
                f"dropout), got dropout={config.dropout}; pass --dropout 0"
            )
        if config.window is not None or config.document_start is not None:
            raise InputError(
                "context parallelism runs full causal attention; a sliding window (--window) "
                "or packed documents (--pack) would be ignored: drop them, or train on one "
                "process"
            )
        self.lm, self.group = lm, group
        self.world_size = group_rank_and_size(group)[1]

    def shard(self, tokens: Tensor, pad_id: int = 0) -> Tensor:
        """(B, T) -> this rank's (B, T'/P), padded with ``pad_id`` to a multiple of 2P."""
        pieces = 2 * self.world_size
        missing = -tokens.shape[1] % pieces
        if missing:
            tokens = F.pad(tokens, (0, missing), value=pad_id)
        return shard_sequence(tokens, 1, causal=True, group=self.group)

    def forward(self, source: Tensor, target_input: Tensor) -> LMOutput:
        if source.shape[1]:
            raise InputError("context parallelism trains windows without a prefix (source (B, 0))")
        lm = self.lm
        length = target_input.shape[1] + (-target_input.shape[1] % (2 * self.world_size))
        lm._check_length(length)
        runs = sequence_layout(length, causal=True, group=self.group).runs()
        x = lm.token_embedding(self.shard(target_input))  # (B, T'/P, D)
        if lm.embedding_scale != 1.0:
            x = x * lm.embedding_scale
        x = torch.cat([lm.positions(part, offset=start) for part, start in _split(x, 1, runs)], 1)
        for block in lm.blocks:
            x = self._block(block, x, runs)
        if lm.final_norm is not None:
            x = lm.final_norm(x)
        return LMOutput(lm.output(x))  # (B, T'/P, V)

    def _block(self, block: nn.Module, x: Tensor, runs: list[tuple[int, int]]) -> Tensor:
        """One EncoderBlock, its self-attention over the ring (as ``block(x, causal=True)``)."""

        def attend(h: Tensor) -> tuple[Tensor, None]:
            return self._self_attention(block.self_attention, h, runs), None

        x, _ = block._residual(x, attend, block.self_attention_norm)
        x, _ = block._residual(x, block._feed_forward_sublayer, block.feed_forward_norm)
        return x

    def _self_attention(self, attention: nn.Module, h: Tensor, runs) -> Tensor:
        """Shapes: h (B, T/P, D) -> (B, T/P, D)."""
        q, k, v = attention._project_self(h)  # (B, H, t, Dh), (B, Hkv, t, Dh) x 2
        if attention.positions is not None:  # RoPE: each run rotated at its global start
            q, k = (
                torch.cat(
                    [attention.positions.rotate(p, start=s) for p, s in _split(t, 2, runs)], 2
                )
                for t in (q, k)
            )
        output = ring_attention(q, k, v, causal=True, group=self.group)  # (B, H, t, Dh)
        return attention.out_proj(merge_heads(output))


def _split(tensor: Tensor, dim: int, runs: list[tuple[int, int]]) -> list[tuple[Tensor, int]]:
    """The local pieces of ``tensor`` along ``dim``, one per run, with the run's global start."""
    pieces, at = [], 0
    for start, size in runs:
        pieces.append((tensor.narrow(dim, at, size), start))
        at += size
    return pieces
