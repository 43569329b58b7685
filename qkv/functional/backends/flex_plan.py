"""The plan of :mod:`.flex_kernel`'s walk over a block mask: the groups of (batch, head)
pairs that share one block-mask entry (with the key/value slices they meet), and for each
query block the runs of consecutive key blocks it visits, partial blocks marked."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ..block_mask import BlockMask, ModEvaluator

__all__ = ["FlexPlan", "plan_flex"]

#: Widest run of key columns computed as one tile.
MAX_RUN_COLS = 1024
#: Scores per tile at most, bounding the batches a group takes at once.
TILE_ELEMENTS = 1 << 22


class _Run(NamedTuple):
    """Consecutive visited key blocks: their columns, and the partial ones' columns."""

    cols: slice
    partial: tuple[slice, ...]


class _Group(NamedTuple):
    """(batch, head) pairs sharing one block-mask entry, and the key/value slices they meet."""

    batches: slice
    heads: slice
    kv_batches: slice
    kv_heads: slice
    per_kv: int  # query heads per key/value head in this group (G)
    folded: bool  # a key/value batch of 1 serving several query batches: stacked as rows
    visits: list[list[_Run]]  # per query block


class FlexPlan(NamedTuple):
    """Everything but tensors that forward and backward share."""

    groups: list[_Group]
    block_rows: int
    scale: float
    mask: ModEvaluator
    score: ModEvaluator | None


def plan_flex(
    block_mask: BlockMask,
    shapes: tuple[torch.Size, torch.Size],
    scale: float,
    score_mod: Callable | None,
) -> FlexPlan:
    """The groups and runs of tiles for a call with query/key shapes ``shapes``."""
    (batch, heads, _, _), (kv_batch, kv_heads, _, _) = shapes
    per_kv = heads // kv_heads
    partial, full = block_mask.dense_blocks()
    mask_b, mask_h = partial.shape[:2]
    states = (partial.to(torch.int8) + 2 * full.to(torch.int8)).tolist()  # 0 / 1 / 2
    bq, bk = block_mask.BLOCK_SIZE
    tk = block_mask.seq_lengths[1]
    width = MAX_RUN_COLS if bk <= MAX_RUN_COLS else bk
    step = max(1, TILE_ELEMENTS // ((heads if mask_h == 1 else 1) * bq * width))
    groups = []
    for mb in range(mask_b):
        batch_ranges = [range(b, min(b + step, batch)) for b in range(0, batch, step)]
        if mask_b > 1:
            batch_ranges = [range(mb, mb + 1)]
        for mh in range(mask_h):
            visits = [_runs(row, bk, tk, width) for row in states[mb][mh]]
            for rng in batch_ranges:
                batches = slice(rng.start, rng.stop)
                whole = mask_h == 1
                groups.append(
                    _Group(
                        batches,
                        slice(0, heads) if whole else slice(mh, mh + 1),
                        slice(0, 1) if kv_batch == 1 else batches,
                        slice(0, kv_heads) if whole else slice(mh // per_kv, mh // per_kv + 1),
                        per_kv if whole else 1,
                        kv_batch == 1 and len(rng) > 1,
                        visits,
                    )
                )
    score = None if score_mod is None else ModEvaluator(score_mod, "score_mod")
    return FlexPlan(groups, bq, scale, ModEvaluator(block_mask.mask_mod, "mask_mod"), score)


def _runs(states: list[int], bk: int, tk: int, width: int) -> list[_Run]:
    """The visited key blocks of one query block (0 empty, 1 partial, 2 full) as runs of at
    most ``width`` columns."""
    runs: list[_Run] = []
    start = None
    partial: list[slice] = []
    for j, state in enumerate([*states, 0]):
        cols = slice(j * bk, min((j + 1) * bk, tk))
        if start is not None and (state == 0 or cols.stop - start > width):
            runs.append(_Run(slice(start, min(j * bk, tk)), tuple(partial)))
            start, partial = None, []
        if state:
            start = cols.start if start is None else start
            if state == 1:
                partial.append(cols)
    return runs
