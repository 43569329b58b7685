"""The language model with each window spread over a context-parallel group (ring attention).

Each of the P ranks of ``group`` holds the zigzag part of every window
(:func:`qkv.distributed.shard_sequence` with ``causal=True``: chunks r and 2P-1-r of 2P).
It embeds its tokens at their *global* positions (learned and sinusoidal input positions,
RoPE's rotations, each contiguous run with its own offset), runs every block with its
self-attention replaced by :func:`qkv.distributed.ring_attention`, and returns the logits of
its own tokens.  Summed over the ranks, the losses and the gradients of the shared weights
are those of the whole window on one process.

Supported: positions learned, sinusoidal, rope (each run at its global offset) and alibi
(its bias as ring attention's ``score_mod``, at global positions); a sliding ``window`` (a
block mask at global positions: ring steps outside the window are skipped).  Not supported:
dropout -- ring attention drops no attention weights, so a model with ``dropout > 0`` would
train without the attention dropout it has on one process; ``dropout=0`` is required; and
packed documents (``document_start``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.distributed import sequence_layout, shard_sequence
from qkv.distributed.layout import group_rank_and_size
from qkv.distributed.ring import ring_attention
from qkv.errors import InputError
from qkv.functional.heads import merge_heads
from qkv.functional.patterns import sliding_window

from .base import LMOutput

__all__ = ["ContextParallelLM"]

#: Position schemes whose every use takes a global start (or global indices), so a rank can
#: place its runs.
SUPPORTED_POSITIONS = ("learned", "sinusoidal", "rope", "alibi")


class ContextParallelLM(nn.Module):
    """``ContextParallelLM(lm, group)``: ``forward(source, target_input)`` with source (B, 0)
    and target_input (B, T) the *whole* window on every rank -> LMOutput with logits
    (B, T'/P, V) of this rank's tokens, T' = T padded up to a multiple of 2P (pads go last,
    where causal attention keeps them from every real token); :meth:`shard` cuts targets
    the same way.  Its parameters are the LM's own (train it, save ``lm``)."""

    def __init__(self, lm: nn.Module, group: Any = None):
        super().__init__()
        config = lm.config
        if config.positions not in SUPPORTED_POSITIONS:
            raise InputError(
                f"context parallelism supports positions {SUPPORTED_POSITIONS}, not "
                f"{config.positions!r}"
            )
        if config.dropout > 0:
            raise InputError(
                f"context parallelism needs dropout 0 (ring attention drops no attention "
                f"weights, so the model would differ from one process's), got "
                f"dropout={config.dropout}; set dropout=0",
                fields=("dropout",),
            )
        if config.document_start is not None:
            raise InputError(
                "context parallelism does not follow packed documents (pack=True): their mask "
                "and restarting positions would be ignored; drop pack, or train on one process",
                fields=("pack",),
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
        lm.check_length(length)  # on every rank alike, before any of them enters the ring
        runs = sequence_layout(length, causal=True, group=self.group).runs()
        local = self.shard(target_input)  # (B, T'/P)
        x = torch.cat([lm.embed(part, offset=start) for part, start in _split(local, 1, runs)], 1)
        if lm.embedding_norm is not None:
            x = lm.embedding_norm(x)
        for block, window in zip(lm.blocks, lm.windows, strict=True):
            x = block.forward_with_attention(
                x,
                lambda h, attention=block.self_attention, window=window: self._attend(
                    attention, h, runs, window
                ),
            )
        if lm.final_norm is not None:
            x = lm.final_norm(x)
        return LMOutput(lm.logits(x))  # (B, T'/P, V)

    def _attend(
        self, attention: nn.Module, h: Tensor, runs: list[tuple[int, int]], window: int | None
    ) -> Tensor:
        """Causal self-attention over the whole window, this rank's rows (ring attention).
        Shapes: h (B, T/P, D) -> (B, T/P, D)."""
        q, k, v = attention.project_self(h)  # (B, H, t, Dh), (B, Hkv, t, Dh) x 2
        positions, score_mod = attention.positions, None
        if positions is not None:  # RoPE: each run rotated at its global start
            q, k = (
                torch.cat([positions.rotate(p, start=s) for p, s in _split(t, 2, runs)], 2)
                for t in (q, k)
            )
            if hasattr(positions, "score_mod"):  # ALiBi: the bias at global positions
                score_mod = positions.score_mod(query_start=0)
        if attention.query_norm is not None:  # QK-norm, after the rotation as in the block
            q, k = attention.query_norm(q), attention.key_norm(k)
        block_mask = None if window is None else _GlobalMask(sliding_window(window))
        output = ring_attention(
            q, k, v, causal=True, block_mask=block_mask, score_mod=score_mod, group=self.group
        )  # (B, H, t, Dh)
        return attention.out_proj(merge_heads(output))


class _GlobalMask(NamedTuple):
    """A block mask as ring attention takes it: a mask_mod over global positions."""

    mask_mod: Any


def _split(tensor: Tensor, dim: int, runs: list[tuple[int, int]]) -> list[tuple[Tensor, int]]:
    """The local pieces of ``tensor`` along ``dim``, one per run, with the run's global start."""
    pieces, at = [], 0
    for start, size in runs:
        pieces.append((tensor.narrow(dim, at, size), start))
        at += size
    return pieces
