"""Block masks: which (query block, key block) tiles of attention are empty, full or partial.

PyTorch's FlexAttention API (``torch.nn.attention.flex_attention``), for qkv's CPU kernel.
A ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (True = may attend, qkv's one convention) says
which keys each query may see; :func:`create_block_mask` evaluates it tile by tile -- never
on the whole (Tq, Tk) grid -- and records for every query block the key blocks it visits,
split into *full* blocks (every pair may attend: no mask is applied) and *partial* ones
(``mask_mod`` is evaluated again on the tile by the kernel).  Blocks in neither list are
never computed, forward or backward.

A mod is written as if called on one scalar index per element; it is evaluated on
broadcast index tensors (fast) and, where that does not give the elementwise answer
(``bias[b][h][q_idx]`` chains indexing), under ``torch.vmap`` as PyTorch does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError
from .mask_mods import MaskMod, ModEvaluator, and_masks, index_range, noop_mask, or_masks

__all__ = [
    "BlockMask",
    "create_block_mask",
    "noop_mask",
    "and_masks",
    "or_masks",
    "ModEvaluator",
    "block_sizes",
    "index_range",
]

#: Mask elements evaluated at once while building a block mask (4 MiB of booleans).
BUILD_ELEMENTS = 1 << 22


def block_sizes(block_size: int | tuple[int, int]) -> tuple[int, int]:
    """BLOCK_SIZE as PyTorch takes it -- an int or a (query, key) pair -- checked."""
    pair = (block_size, block_size) if not isinstance(block_size, (tuple, list)) else block_size
    if len(pair) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in pair):
        raise InputError(
            f"BLOCK_SIZE={block_size!r} must be a positive int or a (query, key) pair of "
            "positive ints, e.g. 128 or (128, 64)"
        )
    return int(pair[0]), int(pair[1])


@dataclass
class BlockMask:
    """Which key blocks each query block visits, as PyTorch's ``BlockMask`` (same fields).

    Shapes (Bm, Hm the mask's batch and heads, 1 where it broadcasts; nQ, nK block counts):
        kv_num_blocks (Bm, Hm, nQ), kv_indices (Bm, Hm, nQ, nK): the *partial* key blocks
        of each query block (the first kv_num_blocks of each row, ascending), int32;
        full_kv_num_blocks / full_kv_indices: the same for *full* blocks;
        q_num_blocks / q_indices, full_q_*: the transpose (query blocks per key block).
    seq_lengths (Q_LEN, KV_LEN); BLOCK_SIZE (query, key); mask_mod, evaluated on partial
    blocks only.
    """

    seq_lengths: tuple[int, int]
    kv_num_blocks: Tensor
    kv_indices: Tensor
    full_kv_num_blocks: Tensor | None
    full_kv_indices: Tensor | None
    q_num_blocks: Tensor | None
    q_indices: Tensor | None
    full_q_num_blocks: Tensor | None
    full_q_indices: Tensor | None
    BLOCK_SIZE: tuple[int, int]
    mask_mod: MaskMod

    @classmethod
    def from_dense_blocks(
        cls,
        partial: Tensor,
        full: Tensor,
        seq_lengths: tuple[int, int],
        block_size: tuple[int, int],
        mask_mod: MaskMod,
    ) -> BlockMask:
        """From boolean (Bm, Hm, nQ, nK) grids of partial and full blocks."""
        kv_num, kv_idx = _ordered(partial)
        full_kv_num, full_kv_idx = _ordered(full)
        q_num, q_idx = _ordered(partial.transpose(-2, -1))
        full_q_num, full_q_idx = _ordered(full.transpose(-2, -1))
        return cls(
            tuple(seq_lengths), kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx,
            full_q_num, full_q_idx, tuple(block_size), mask_mod,
        )  # fmt: skip

    @property
    def shape(self) -> tuple[int, ...]:
        """(Bm, Hm, Q_LEN, KV_LEN)."""
        return (*self.kv_num_blocks.shape[:2], *self.seq_lengths)

    def dense_blocks(self) -> tuple[Tensor, Tensor]:
        """(partial, full): boolean (Bm, Hm, nQ, nK) grids."""
        return _dense(self.kv_num_blocks, self.kv_indices), _dense(
            self.full_kv_num_blocks, self.full_kv_indices
        )

    def to_dense(self) -> Tensor:
        """(Bm, Hm, nQ, nK) int32: 1 where a block is computed (partial or full), else 0."""
        partial, full = self.dense_blocks()
        return (partial | full).to(torch.int32)

    def sparsity(self) -> float:
        """The percentage of the (B, H, Q_LEN, KV_LEN) grid in blocks never computed."""
        partial, full = self.dense_blocks()
        rows, cols = self._block_extents()
        size = rows[:, None] * cols[None, :]  # elements per block, ragged last blocks
        computed = ((partial | full).double() * size).sum().item()
        total = partial.shape[0] * partial.shape[1] * self.seq_lengths[0] * self.seq_lengths[1]
        return 100.0 * (1.0 - computed / total)

    def is_causal(self, batch: int, heads: int) -> bool:
        """Whether, on a call with ``batch`` and ``heads``, this mask is exactly the causal
        triangle q_idx >= kv_idx: square, its blocks full below the diagonal, partial on it,
        empty above, and its mask_mod giving the lower triangle on every diagonal tile (for
        each batch and head the tile kernel would evaluate it on)."""
        (tq, tk), (bq, bk) = self.seq_lengths, self.BLOCK_SIZE
        if tq != tk or bq != bk:
            return False
        partial, full = self.dense_blocks()
        blocks = torch.arange(partial.shape[-1], device=partial.device)
        if not (
            torch.equal(full, (blocks[:, None] > blocks).expand_as(full))
            and torch.equal(partial, (blocks[:, None] == blocks).expand_as(partial))
        ):
            return False
        mask_b, mask_h = partial.shape[:2]
        device = partial.device
        b = index_range(0, batch if mask_b == 1 else mask_b, device).view(-1, 1, 1, 1)
        h = index_range(0, heads if mask_h == 1 else mask_h, device).view(1, -1, 1, 1)
        evaluate = ModEvaluator(self.mask_mod, "mask_mod")
        for start in range(0, tq, bq):
            q = index_range(start, min(start + bq, tq), device).view(1, 1, -1, 1)
            kv = q.view(1, 1, 1, -1)
            shape = (b.shape[0], h.shape[1], q.shape[2], q.shape[2])
            if not torch.equal(
                evaluate((), (b, h, q, kv), shape).expand(shape), (q >= kv).expand(shape)
            ):
                return False
        return True

    def _block_extents(self) -> tuple[Tensor, Tensor]:
        (tq, tk), (bq, bk) = self.seq_lengths, self.BLOCK_SIZE
        rows = (tq - torch.arange(0, tq, bq)).clamp(max=bq).double()
        return rows, (tk - torch.arange(0, tk, bk)).clamp(max=bk).double()

    def to_string(self, grid_size: int = 20, limit: int = 4) -> str:
        """A picture: a block row per line, two characters per block: '██' full, '░░'
        partial, '  ' skipped; grids over ``grid_size`` blocks are summarised in cells."""
        partial, full = self.dense_blocks()
        pictures = []
        for index in itertools.islice(itertools.product(*map(range, partial.shape[:2])), limit):
            pictures.append(f"{index}\n" + _picture(partial[index], full[index], grid_size))
        if partial.shape[0] * partial.shape[1] > limit:
            pictures.append(f"... to_string(limit=N) for more than {limit}")
        return "\n".join(pictures)

    def __str__(self) -> str:
        return (
            f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
            f"sparsity={self.sparsity():.2f}%,\n{self.to_string().rstrip()}\n)"
        )


def _picture(partial: Tensor, full: Tensor, grid_size: int) -> str:
    n_rows, n_cols = partial.shape
    step_r, step_c = -(-n_rows // grid_size), -(-n_cols // grid_size)
    lines = []
    for r in range(0, n_rows, step_r):
        line = ""
        for c in range(0, n_cols, step_c):
            cell_full = full[r : r + step_r, c : c + step_c]
            cell_any = cell_full | partial[r : r + step_r, c : c + step_c]
            line += "██" if cell_full.all() else "░░" if cell_any.any() else "  "
        lines.append(line)
    return "\n".join(lines)


def _ordered(grid: Tensor) -> tuple[Tensor, Tensor]:
    """Boolean (..., n, m) -> (count (..., n), indices (..., n, m)): the True columns of
    each row first, ascending, then the others (PyTorch's layout)."""
    count = grid.sum(-1, dtype=torch.int32)
    indices = torch.argsort(grid.to(torch.int8), dim=-1, descending=True, stable=True)
    return count, indices.to(torch.int32)


def _dense(count: Tensor | None, indices: Tensor | None) -> Tensor:
    if count is None or indices is None:
        raise InputError("this BlockMask has no full-block lists; build it with create_block_mask")
    used = torch.arange(indices.shape[-1], device=indices.device) < count[..., None]
    grid = torch.zeros(indices.shape, dtype=torch.bool, device=indices.device)
    return grid.scatter_(-1, indices.long(), used)


def create_block_mask(
    mask_mod: MaskMod,
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    device: torch.device | str = "cpu",
    BLOCK_SIZE: int | tuple[int, int] = 128,
) -> BlockMask:
    """The block mask of ``mask_mod`` for (B, H, Q_LEN, KV_LEN), as PyTorch's function.

    ``B`` / ``H`` of None build a mask that broadcasts over the batch / heads (``mask_mod``
    is then evaluated with b = 0 / h = 0 to find the blocks).  ``BLOCK_SIZE`` is an int or
    a (query, key) pair.  ``mask_mod`` is evaluated on runs of query blocks, at most
    about 16M elements at a time, never on the whole grid.
    """
    if not callable(mask_mod):
        raise InputError(
            f"mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, got {mask_mod!r}"
        )
    bq, bk = block_sizes(BLOCK_SIZE)
    for name, value in (("B", B), ("H", H), ("Q_LEN", Q_LEN), ("KV_LEN", KV_LEN)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InputError(f"create_block_mask: {name}={value!r} must be a positive int")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):  # torch's own error lists every backend it knows
        raise InputError(
            f"create_block_mask: device={device!r} is not a device name; use 'cpu' or 'cuda' "
            "(the device of the query)"
        ) from None
    batches, heads = B or 1, H or 1
    n_q, n_k = -(-Q_LEN // bq), -(-KV_LEN // bk)
    evaluate = ModEvaluator(mask_mod, "mask_mod")
    b = index_range(0, batches, device).view(-1, 1, 1, 1)
    h = index_range(0, heads, device).view(1, -1, 1, 1)
    kv = index_range(0, KV_LEN, device).view(1, 1, 1, -1)
    step = max(1, BUILD_ELEMENTS // (batches * heads * bq * n_k * bk))  # query blocks at a time
    partial, full = [], []
    for first in range(0, n_q, step):
        rows = slice(first * bq, min((first + step) * bq, Q_LEN))
        q = index_range(rows.start, rows.stop, device).view(1, 1, -1, 1)
        shape = (batches, heads, rows.stop - rows.start, KV_LEN)
        keep = evaluate((), (b, h, q, kv), shape).expand(shape)
        some, every = _block_any_all(keep, bq, bk)
        partial.append(some & ~every)
        full.append(every)
    return BlockMask.from_dense_blocks(
        torch.cat(partial, 2), torch.cat(full, 2), (Q_LEN, KV_LEN), (bq, bk), mask_mod
    )


def _block_any_all(keep: Tensor, bq: int, bk: int) -> tuple[Tensor, Tensor]:
    """(Bm, Hm, r, Tk) booleans -> per (bq, bk) block: any True, all True (ragged edge
    blocks judged on their real elements).  One counting pass over the elements."""
    batches, heads, rows, cols = keep.shape
    n_r, n_c = -(-rows // bq), -(-cols // bk)
    if rows % bq or cols % bk:
        padded = keep.new_zeros(batches, heads, n_r * bq, n_c * bk)
        padded[..., :rows, :cols] = keep
        keep = padded
    # bytes summed along the key block first (contiguous), then along the query rows
    counts = keep.view(torch.uint8).view(batches, heads, n_r, bq, n_c, bk).sum(5, dtype=torch.int16)
    counts = counts.sum(3, dtype=torch.int32)  # (Bm, Hm, n_r, n_c)
    row_sizes = (rows - torch.arange(0, rows, bq, device=keep.device)).clamp(max=bq)
    col_sizes = (cols - torch.arange(0, cols, bk, device=keep.device)).clamp(max=bk)
    return counts > 0, counts == row_sizes[:, None] * col_sizes[None, :]
