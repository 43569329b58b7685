"""The plan of :mod:`.flex_kernel`'s walk over a block mask: the groups of (batch, head)
pairs that share one block-mask entry (with the key/value slices they meet), for each query
block the runs of consecutive key blocks it visits (partial blocks marked), and the bundles
of query blocks that visit alike -- computed as one batched tile."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ..block_mask import BlockMask, ModEvaluator
from .flex_biases import TileBiases

__all__ = ["FlexPlan", "plan_flex", "walk_grid"]

#: Widest run of key columns computed as one tile.
MAX_RUN_COLS = 1024
#: Scores per tile at most (2 MB of float32, a core's L2 on the machines measured),
#: bounding the batches a group takes at once and the query blocks a bundle takes.
TILE_ELEMENTS = 1 << 19
#: Blocks of at least this many rows and columns are walked in quarters where some are
#: partial (:func:`walk_grid`).
REFINE_BLOCK = 128
#: Mask elements evaluated at once while finding the quarters (a mask_mod evaluated under
#: vmap expands its four index tensors to this many elements).
REFINE_ELEMENTS = 1 << 20


class _Run(NamedTuple):
    """Consecutive visited key blocks: their columns, and the partial ones' columns."""

    cols: slice
    partial: tuple[slice, ...]


class _Bundle(NamedTuple):
    """Query blocks ``count`` in number, ``step`` rows apart from row ``start`` on, each of
    ``rows`` rows, whose visits have one shape: block k visits ``runs`` (the first block's
    columns) shifted by k * step.  A sliding window's inner blocks are one bundle; a packed
    batch's blocks at one place in their documents are another."""

    start: int
    step: int
    count: int
    rows: int
    runs: tuple[_Run, ...]


class _Group(NamedTuple):
    """(batch, head) pairs sharing one block-mask entry, and the key/value slices they meet."""

    batches: slice
    heads: slice
    kv_batches: slice
    kv_heads: slice
    per_kv: int  # query heads per key/value head in this group (G)
    folded: bool  # a key/value batch of 1 serving several query batches: stacked as rows
    bundles: list[_Bundle]


class FlexPlan(NamedTuple):
    """Everything but tensors that forward and backward share."""

    groups: list[_Group]
    block_rows: int
    scale: float
    mask: ModEvaluator
    score: ModEvaluator | None
    biases: TileBiases


def plan_flex(
    block_mask: BlockMask,
    shapes: tuple[torch.Size, torch.Size],
    scale: float,
    score_mod: Callable | None,
) -> FlexPlan:
    """The groups and runs of tiles for a call with query/key shapes ``shapes``."""
    (batch, heads, _, _), (kv_batch, kv_heads, _, _) = shapes
    per_kv = heads // kv_heads
    partial, full, (bq, bk) = walk_grid(block_mask)
    mask_b, mask_h = partial.shape[:2]
    states = (partial.to(torch.int8) + 2 * full.to(torch.int8)).tolist()  # 0 / 1 / 2
    tq, tk = block_mask.seq_lengths
    width = MAX_RUN_COLS if bk <= MAX_RUN_COLS else bk
    step = max(1, TILE_ELEMENTS // ((heads if mask_h == 1 else 1) * bq * width))
    groups = []
    for mb in range(mask_b):
        batch_ranges = [range(b, min(b + step, batch)) for b in range(0, batch, step)]
        if mask_b > 1:
            batch_ranges = [range(mb, mb + 1)]
        for mh in range(mask_h):
            visits = [_runs(row, bk, tk, width) for row in states[mb][mh]]
            # A tile's rows per query block: G heads' (and a folded group's batches').
            rows = bq * (per_kv if mask_h == 1 else 1) * (step if kv_batch < batch else 1)
            widest = max((run.cols.stop - run.cols.start for v in visits for run in v), default=1)
            bundles = _bundles(visits, bq, tq, max(1, TILE_ELEMENTS // (rows * widest)))
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
                        bundles,
                    )
                )
    score = None if score_mod is None else ModEvaluator(score_mod, "score_mod")
    mask = ModEvaluator(block_mask.mask_mod, "mask_mod")
    return FlexPlan(groups, bq, scale, mask, score, TileBiases())


def walk_grid(block_mask: BlockMask) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """The (partial, full) block grids the kernel walks, and their block size: the block
    mask's own, or -- where its blocks have at least ``REFINE_BLOCK`` rows and columns and
    some are partial -- its blocks' quarters.  The mask_mod, evaluated once on each partial
    block, says which of its quarters are empty (skipped), full (no mask) or partial; a
    full block's quarters are full.  A causal window of 256 at block 128 then computes 320
    key columns per query row instead of 384, and applies its mask on 128 of them instead
    of 256.  Made once per block mask (kept on it: a model reuses its mask every step)."""
    partial, full = block_mask.dense_blocks()
    (bq, bk), (tq, tk) = block_mask.BLOCK_SIZE, block_mask.seq_lengths
    if min(bq, bk) < REFINE_BLOCK or bq % 2 or bk % 2 or not bool(partial.any()):
        return partial, full, (bq, bk)
    walked = getattr(block_mask, "_walk_grid", None)
    if walked is not None and walked[0] is block_mask.mask_mod:
        return walked[1]
    hq, hk = bq // 2, bk // 2
    nq, nk = -(-tq // hq), -(-tk // hk)
    fine_full = full.repeat_interleave(2, -2).repeat_interleave(2, -1)[..., :nq, :nk].clone()
    fine_partial = torch.zeros_like(fine_full)
    evaluate = ModEvaluator(block_mask.mask_mod, "mask_mod")
    rows, cols = (torch.arange(n, device=partial.device) for n in (bq, bk))
    for chunk in partial.nonzero().split(max(1, REFINE_ELEMENTS // (bq * bk))):
        mb, mh, i, j = chunk.unbind(1)  # b = 0 / h = 0 for a broadcast mask, as it was built
        q, kv = i[:, None] * bq + rows, j[:, None] * bk + cols  # (P, bq), (P, bk)
        valid = (q < tq)[:, :, None] & (kv < tk)[:, None, :]
        index = (mb.view(-1, 1, 1), mh.view(-1, 1, 1))
        index += (q.clamp(max=tq - 1)[:, :, None], kv.clamp(max=tk - 1)[:, None, :])
        keep = evaluate((), index, valid.shape).expand(valid.shape)

        def quarters(x: torch.Tensor, reduce: str) -> torch.Tensor:  # (P, bq, bk) -> (P, 2, 2)
            x = x.reshape(-1, 2, hq, 2, hk)
            return getattr(getattr(x, reduce)(4), reduce)(2)

        some = quarters(keep & valid, "any")
        every = quarters(keep | ~valid, "all") & quarters(valid, "any")
        for a in (0, 1):
            for c in (0, 1):
                fi, fj = 2 * i + a, 2 * j + c
                inside = (fi < nq) & (fj < nk)
                at = (mb[inside], mh[inside], fi[inside], fj[inside])
                fine_partial[at] = (some & ~every)[:, a, c][inside]
                fine_full[at] = every[:, a, c][inside]
    grid = (fine_partial, fine_full, (hq, hk))
    block_mask._walk_grid = (block_mask.mask_mod, grid)
    return grid


def _bundles(visits: list[list[_Run]], bq: int, tq: int, most: int) -> list[_Bundle]:
    """The query blocks that visit something, as bundles of at most ``most`` blocks: blocks
    whose runs sit at the same offsets from their first row, equally spaced."""
    alike: dict[tuple, list[int]] = {}
    for i, runs in enumerate(visits):
        if runs:
            start = i * bq
            shape = tuple(
                (
                    r.cols.start - start,
                    r.cols.stop - start,
                    *((p.start - start, p.stop - start) for p in r.partial),
                )
                for r in runs
            )
            alike.setdefault((min(bq, tq - start), shape), []).append(i)
    bundles = []
    for (rows, _), blocks in alike.items():
        first = 0
        while first < len(blocks):  # the longest equally spaced stretch, at most `most` blocks
            gap = blocks[first + 1] - blocks[first] if first + 1 < len(blocks) else 1
            last = first + 1
            while (
                last < len(blocks)
                and last - first < most
                and blocks[last] - blocks[last - 1] == gap
            ):
                last += 1
            i = blocks[first]
            bundles.append(_Bundle(i * bq, gap * bq, last - first, rows, tuple(visits[i])))
            first = last
    return bundles


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
