"""Block masks: which (query block, key block) tiles of attention are empty, full or partial.

One concept, one module (about 640 lines): the BlockMask record, its construction from a
mask_mod or from block lists, and the operations PyTorch's API defines on it (slicing for
decoding, ``_adjust``, ``to``, ``to_string``) read and write the same fields, so they stay
together.

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

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import InputError
from .mask_mods import MaskMod, ModEvaluator, and_masks, index_range, noop_mask, or_masks

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "BlockMask",
    "create_block_mask",
    "create_mask",
    "as_block_mask",
    "sliced_mask_mod",
    "noop_mask",
    "and_masks",
    "or_masks",
    "ModEvaluator",
    "block_sizes",
    "index_range",
]

#: The tile (query rows, key columns) a block mask is cut into unless one asks otherwise:
#: PyTorch's default, and the one size every part of qkv uses.
DEFAULT_BLOCK_SIZE = 128

#: Mask elements evaluated at once while building a block mask (4 MiB of booleans).
BUILD_ELEMENTS = 1 << 22
#: The tensor fields of a BlockMask (PyTorch's order).
_TENSOR_FIELDS = (
    "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks",
    "q_indices", "full_q_num_blocks", "full_q_indices", "dq_write_order",
    "dq_write_order_full", "dq_kv_order",
)  # fmt: skip


def block_sizes(block_size: int | tuple[int, int]) -> tuple[int, int]:
    """BLOCK_SIZE as PyTorch takes it -- an int or a (query, key) pair -- checked."""
    pair = (block_size, block_size) if not isinstance(block_size, (tuple, list)) else block_size
    if len(pair) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in pair):
        raise InputError(
            f"BLOCK_SIZE={block_size!r} must be a positive int or a (query, key) pair of "
            "positive ints, e.g. 128 or (128, 64)"
        )
    return int(pair[0]), int(pair[1])


class BlockListsError(InputError, AssertionError):
    """Block lists that do not fit together (PyTorch asserts the same)."""


class BlockIndexError(InputError, IndexError):
    """An int index past a block mask's batches, heads or query-block rows."""


def sliced_mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """The mask_mod of a sliced block mask, which may not be used: slicing rows out of a
    mask loses where they were, so the mask_mod must be set again (with the offset)."""
    raise RuntimeError(
        "Cannot use mask_mod from a sliced BlockMask: set it again from the original mask's, "
        "shifted to the sliced rows, e.g. sliced.mask_mod = lambda b, h, q, kv: "
        "mask.mask_mod(b, h, q + offset, kv)"
    )


@dataclass
class BlockMask:
    """Which key blocks each query block visits, as PyTorch's ``BlockMask`` (same fields,
    same constructor, same methods).

    Shapes (Bm, Hm the mask's batch and heads, 1 where it broadcasts; nQ, nK block counts):
        kv_num_blocks (Bm, Hm, nQ), kv_indices (Bm, Hm, nQ, nK): the *partial* key blocks
        of each query block (the first kv_num_blocks of each row; ascending when qkv built
        them), int32; full_kv_num_blocks / full_kv_indices: the same for *full* blocks
        (None: every visited block is partial); q_num_blocks / q_indices, full_q_*: the
        transpose (query blocks per key block).  dq_write_order, dq_write_order_full,
        dq_kv_order, dq_kv_order_spt: PyTorch's metadata for a deterministic GPU backward,
        carried along (the CPU kernel's backward is deterministic without them).
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
    BLOCK_SIZE: tuple[int, int] = (DEFAULT_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)
    mask_mod: MaskMod = noop_mask
    dq_write_order: Tensor | None = field(default=None, kw_only=True)
    dq_write_order_full: Tensor | None = field(default=None, kw_only=True)
    dq_kv_order: Tensor | None = field(default=None, kw_only=True)
    dq_kv_order_spt: bool | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.kv_indices.dim() < 2:
            raise InputError("BlockMask must have at least 2 dimensions (kv_indices)")
        for name in ("kv", "q"):
            if (getattr(self, f"full_{name}_num_blocks") is None) != (
                getattr(self, f"full_{name}_indices") is None
            ):
                raise BlockListsError(
                    f"full_{name}_num_blocks and full_{name}_indices must be both provided or "
                    "omitted"
                )
        self.seq_lengths = tuple(self.seq_lengths)
        self.BLOCK_SIZE = block_sizes(self.BLOCK_SIZE)

    @classmethod
    def from_dense_blocks(
        cls,
        partial: Tensor,
        full: Tensor | None,
        seq_lengths: tuple[int, int],
        block_size: tuple[int, int],
        mask_mod: MaskMod,
    ) -> BlockMask:
        """From boolean (Bm, Hm, nQ, nK) grids of partial and full blocks (``full`` None:
        no full-block lists, every visited block partial)."""
        kv_num, kv_idx = _ordered(partial)
        q_num, q_idx = _ordered(partial.transpose(-2, -1))
        full_kv = full_q = (None, None)
        if full is not None:
            full_kv, full_q = _ordered(full), _ordered(full.transpose(-2, -1))
        return cls(
            tuple(seq_lengths), kv_num, kv_idx, *full_kv, q_num, q_idx, *full_q,
            tuple(block_size), mask_mod,
        )  # fmt: skip

    @classmethod
    def from_kv_blocks(
        cls,
        kv_num_blocks: Tensor,
        kv_indices: Tensor,
        full_kv_num_blocks: Tensor | None = None,
        full_kv_indices: Tensor | None = None,
        BLOCK_SIZE: int | tuple[int, int] = DEFAULT_BLOCK_SIZE,
        mask_mod: MaskMod | None = None,
        seq_lengths: tuple[int, int] | None = None,
        compute_q_blocks: bool = True,
        *,
        dq_write_order: Tensor | None = None,
        dq_write_order_full: Tensor | None = None,
        dq_kv_order: Tensor | bool | None = None,
    ) -> BlockMask:
        """A block mask from its key-block lists, as PyTorch's ``BlockMask.from_kv_blocks``.

        Shapes: kv_num_blocks (..., nQ), kv_indices (..., nQ, nK) (the first kv_num_blocks
        of each row are the visited blocks, in any order); the same for the full blocks.
        ``seq_lengths`` defaults to (nQ * BLOCK_SIZE[0], nK * BLOCK_SIZE[1]); the
        transposed lists are made when ``compute_q_blocks``; ``mask_mod`` defaults to
        :func:`noop_mask`.  ``dq_kv_order``: a bool (a scheduling order) or a tensor, kept.
        """
        if not isinstance(kv_indices, Tensor) or kv_indices.dim() < 2:
            raise InputError("BlockMask must have at least 2 dimensions (kv_indices)")
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise BlockListsError(
                "full_kv_num_blocks and full_kv_indices must be both provided or omitted"
            )
        if dq_kv_order is not None and not isinstance(dq_kv_order, (bool, Tensor)):
            raise InputError(f"dq_kv_order must be a bool, Tensor or None, got {dq_kv_order!r}")
        bq, bk = block_sizes(BLOCK_SIZE)
        if seq_lengths is None:
            seq_lengths = (kv_indices.shape[-2] * bq, kv_indices.shape[-1] * bk)
        q_lists = full_q_lists = (None, None)
        if compute_q_blocks:
            q_lists = _transposed(kv_num_blocks, kv_indices)
            if full_kv_num_blocks is not None:
                full_q_lists = _transposed(full_kv_num_blocks, full_kv_indices)
        return cls(
            tuple(seq_lengths), kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
            *q_lists, *full_q_lists, (bq, bk), noop_mask if mask_mod is None else mask_mod,
            dq_write_order=dq_write_order, dq_write_order_full=dq_write_order_full,
            dq_kv_order=dq_kv_order if isinstance(dq_kv_order, Tensor) else None,
            dq_kv_order_spt=dq_kv_order if isinstance(dq_kv_order, bool) else None,
        )  # fmt: skip

    @property
    def shape(self) -> tuple[int, ...]:
        """(Bm, Hm, Q_LEN, KV_LEN) (fewer leading dimensions for a mask indexed by an int)."""
        return (*self.kv_indices.shape[:-2], *self.seq_lengths)

    def numel(self) -> int:
        """Elements of the (Bm, Hm, Q_LEN, KV_LEN) grid the mask describes."""
        return math.prod(self.shape)

    def as_tuple(self, flatten: bool = True) -> tuple:
        """The fields in PyTorch's order (what its kernels take); ``flatten`` spreads
        seq_lengths and BLOCK_SIZE into two ints each."""
        lengths = tuple(self.seq_lengths) if flatten else (tuple(self.seq_lengths),)
        sizes = tuple(self.BLOCK_SIZE) if flatten else (tuple(self.BLOCK_SIZE),)
        return (
            *lengths, self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks,
            self.full_kv_indices, self.q_num_blocks, self.q_indices, self.full_q_num_blocks,
            self.full_q_indices, self.dq_write_order, self.dq_write_order_full,
            self.dq_kv_order, self.dq_kv_order_spt, *sizes, self.mask_mod,
        )  # fmt: skip

    def to(self, device: torch.device | str) -> BlockMask:
        """A copy with every tensor on ``device`` (this mask is not changed)."""
        moved = {
            name: None if value is None else value.to(device)
            for name, value in vars(self).items()
            if isinstance(value, Tensor) or (name in _TENSOR_FIELDS and value is None)
        }
        return dataclasses.replace(self, **moved)

    def __getitem__(self, index) -> BlockMask:
        """The mask of some batches, heads or query-block rows, as PyTorch's: ``index``
        applies to (Bm, Hm, nQ) -- an int keeps its dimension (``mask[0]`` is (1, Hm, nQ)),
        a slice or index tensor selects -- and seq_lengths stay.  Decoding takes one row
        per step: ``step = mask[:, :, position // BLOCK_SIZE[0]]``, then sets
        ``step.seq_lengths = (1, KV_LEN)`` and ``step.mask_mod`` to the original's shifted
        to ``position`` (the sliced mask's mask_mod raises until then)."""
        if self.dq_kv_order is not None:
            raise InputError(
                "a BlockMask with a tensor dq_kv_order cannot be sliced: build it again with "
                "create_block_mask for the shape you need"
            )
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > 3:
            raise InputError(
                f"a BlockMask takes at most 3 indices (B, H, query block), got {index}"
            )
        sizes = self.kv_num_blocks.shape[:3]
        padded = (*index, *[slice(None)] * (3 - len(index)))
        for i, n, name in zip(padded, sizes, ("batch", "head", "query-block"), strict=True):
            if isinstance(i, int) and not -n <= i < n:
                raise BlockIndexError(f"{name} index {i} is out of range for a mask of {n}")
        index = tuple(
            slice(i % n, i % n + 1) if isinstance(i, int) else i
            for i, n in zip(padded, sizes, strict=True)
        )
        full = (None, None)
        if self.full_kv_num_blocks is not None:
            full = (self.full_kv_num_blocks[index], self.full_kv_indices[index])
        sliced = BlockMask.from_kv_blocks(
            self.kv_num_blocks[index], self.kv_indices[index], *full,
            BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=sliced_mask_mod, seq_lengths=self.seq_lengths,
            compute_q_blocks=self.q_indices is not None,
        )  # fmt: skip
        sliced.dq_kv_order_spt = self.dq_kv_order_spt
        if self.dq_write_order is not None:
            sliced.dq_write_order, sliced.dq_write_order_full = dq_write_order(
                sliced, bool(self.dq_kv_order_spt)
            )
        return sliced

    def _adjust(self, new_q_len: int, new_kv_len: int) -> BlockMask:
        """The mask cropped (or its last blocks extended) to (new_q_len, new_kv_len): the
        blocks of the upper-left corner, the same mask_mod -- right for masks that do not
        depend on the lengths (causal, a window), as PyTorch's."""
        if self.dq_kv_order is not None:
            raise InputError(
                "a BlockMask with a tensor dq_kv_order cannot be adjusted: build it again with "
                "create_block_mask for the shape you need"
            )
        bq, bk = self.BLOCK_SIZE
        rows, cols = -(-new_q_len // bq), -(-new_kv_len // bk)
        full = (None, None)
        if self.full_kv_num_blocks is not None:
            full = _cropped(self.full_kv_num_blocks, self.full_kv_indices, rows, cols)
        adjusted = BlockMask.from_kv_blocks(
            *_cropped(self.kv_num_blocks, self.kv_indices, rows, cols), *full,
            BLOCK_SIZE=self.BLOCK_SIZE, mask_mod=self.mask_mod,
            seq_lengths=(new_q_len, new_kv_len), compute_q_blocks=self.q_indices is not None,
        )  # fmt: skip
        adjusted.dq_kv_order_spt = self.dq_kv_order_spt
        if self.dq_write_order is not None:
            adjusted.dq_write_order, adjusted.dq_write_order_full = dq_write_order(
                adjusted, bool(self.dq_kv_order_spt)
            )
        return adjusted

    def dense_blocks(self) -> tuple[Tensor, Tensor]:
        """(partial, full): boolean (Bm, Hm, nQ, nK) grids, nK = ceil(KV_LEN / BLOCK_SIZE[1])
        (list entries beyond it ignored); full is all False without full-block lists."""
        n_k = -(-self.seq_lengths[1] // self.BLOCK_SIZE[1])
        partial = _dense(self.kv_num_blocks, self.kv_indices, n_k)
        if self.full_kv_num_blocks is None:
            return partial, torch.zeros_like(partial)
        return partial, _dense(self.full_kv_num_blocks, self.full_kv_indices, n_k)

    def to_dense(self) -> Tensor:
        """(Bm, Hm, nQ, nK) int32: 1 where a block is computed (partial or full), else 0."""
        partial, full = self.dense_blocks()
        return (partial | full).to(torch.int32)

    def sparsity(self) -> float:
        """The percentage of the (B, H, Q_LEN, KV_LEN) grid in blocks never computed."""
        partial, full = self.dense_blocks()
        rows, cols = self._block_extents()
        rows, cols = rows[: partial.shape[-2]], cols[: partial.shape[-1]]
        size = rows[:, None] * cols[None, :]  # elements per block, ragged last blocks
        computed = ((partial | full).double() * size).sum().item()
        total = math.prod(partial.shape[:-2]) * self.seq_lengths[0] * self.seq_lengths[1]
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

    def to_string(self, grid_size: int | tuple[int, int] = (20, 20), limit: int = 4) -> str:
        """A picture: a block row per line, two characters per block: '██' full, '░░'
        partial, '  ' skipped; grids over ``grid_size`` blocks -- an int, a (rows, columns)
        pair, or -1 for every block -- are summarised in cells."""
        partial, full = self.dense_blocks()
        if grid_size == -1:
            grid = partial.shape[-2:]
        elif isinstance(grid_size, int):
            grid = (grid_size, grid_size)
        else:
            grid = tuple(grid_size)
        pictures = []
        lead = partial.shape[:-2]
        for index in itertools.islice(itertools.product(*map(range, lead)), limit):
            pictures.append(f"{index}\n" + _picture(partial[index], full[index], grid))
        if math.prod(lead) > limit:
            pictures.append(f"... to_string(limit=N) for more than {limit}")
        return "\n".join(pictures)

    def __str__(self) -> str:
        return (
            f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
            f"sparsity={self.sparsity():.2f}%,\n{self.to_string().rstrip()}\n)"
        )

    def __repr__(self) -> str:
        name = getattr(self.mask_mod, "__name__", repr(self.mask_mod))
        return f"BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, mask_mod={name})"


def _picture(partial: Tensor, full: Tensor, grid: tuple[int, int]) -> str:
    n_rows, n_cols = partial.shape
    step_r, step_c = max(1, -(-n_rows // grid[0])), max(1, -(-n_cols // grid[1]))
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


def _dense(count: Tensor, indices: Tensor, n_cols: int) -> Tensor:
    """(count (..., n), indices (..., n, m)) -> boolean (Bm, Hm, n, n_cols): the first
    ``count`` entries of each row set (entries at or past ``n_cols`` dropped); fewer than
    two leading dimensions are filled with 1s."""
    indices = indices.long()
    used = torch.arange(indices.shape[-1], device=indices.device) < count[..., None]
    used &= (indices >= 0) & (indices < n_cols)
    grid = torch.zeros((*indices.shape[:-1], n_cols + 1), dtype=torch.bool, device=indices.device)
    grid.scatter_(-1, torch.where(used, indices, n_cols), used)
    grid = grid[..., :n_cols]
    return grid.view(*[1] * (4 - grid.dim()), *grid.shape) if grid.dim() < 4 else grid


def _transposed(count: Tensor, indices: Tensor) -> tuple[Tensor, Tensor]:
    """Key-block lists per query block -> query-block lists per key block (m columns)."""
    grid = _dense(count, indices, indices.shape[-1])
    grid = grid.view(*indices.shape[:-2], *grid.shape[-2:])
    return _ordered(grid.transpose(-2, -1))


def _cropped(count: Tensor, indices: Tensor, rows: int, cols: int) -> tuple[Tensor, Tensor]:
    """The lists of the first ``rows`` query blocks, keeping only key blocks below
    ``cols`` (each row's kept blocks stay first: the dropped ones are moved behind)."""
    count, indices = count[..., :rows], indices[..., :rows, :]
    used = torch.arange(indices.shape[-1], device=indices.device) < count[..., None]
    kept = used & (indices < cols)
    order = torch.argsort(kept.to(torch.int8), dim=-1, descending=True, stable=True)
    indices = indices.gather(-1, order)[..., : max(cols, 1)]
    return kept.sum(-1, dtype=torch.int32), indices.to(torch.int32).contiguous()


def dq_write_order(block_mask: BlockMask, descending: bool) -> tuple[Tensor, Tensor | None]:
    """PyTorch's deterministic-dQ metadata: for each (key block n, its j-th query block m
    in the q lists), the rank of n among the key blocks that query block m visits --
    ascending, or from the last when ``descending``.  Shapes (B, H, nK, nQ) int32, for the
    partial lists and the full ones (None without full lists)."""
    if block_mask.q_indices is None:
        raise InputError("dq_write_order needs the q lists: build the mask with compute_q_blocks")
    partial, full = block_mask.dense_blocks()
    n_k = block_mask.q_indices.shape[-2]
    visited = (partial | full).to(torch.int32)[..., :n_k]  # (B, H, nQ, nK)
    before = visited.cumsum(-1) - visited  # visited blocks left of n in row m
    rank = visited.sum(-1, keepdim=True) - 1 - before if descending else before

    def gather(q_indices: Tensor) -> Tensor:  # (B, H, nK, j) -> rank[b, h, m, n]
        m = q_indices.long().clamp(0, rank.shape[-2] - 1)
        per_n = rank.transpose(-2, -1).expand(*m.shape[:2], *rank.shape[-1:-3:-1])
        return per_n.gather(-1, m).to(torch.int32)

    full_order = None
    if block_mask.full_q_indices is not None:
        full_order = gather(block_mask.full_q_indices)
    return gather(block_mask.q_indices), full_order


def create_block_mask(
    mask_mod: MaskMod,
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    device: torch.device | str | None = None,
    BLOCK_SIZE: int | tuple[int, int] = DEFAULT_BLOCK_SIZE,
    _compile: bool = False,
    separate_full_blocks: bool = True,
    compute_dq_write_order: bool = False,
    dq_kv_order: bool = True,
) -> BlockMask:
    """The block mask of ``mask_mod`` for (B, H, Q_LEN, KV_LEN), as PyTorch's function
    (every argument, with the same meaning).

    ``B`` / ``H`` of None build a mask that broadcasts over the batch / heads (``mask_mod``
    is then evaluated with b = 0 / h = 0 to find the blocks).  ``device`` None: the current
    accelerator if there is one, else the CPU (PyTorch's rule).  ``BLOCK_SIZE`` is an int
    or a (query, key) pair.  ``mask_mod`` is evaluated on runs of query blocks, at most
    about 4M elements at a time, never on the whole grid -- so ``_compile`` (PyTorch's way
    to avoid the whole grid) is accepted and not needed.  ``separate_full_blocks=False``
    lists every visited block as partial (mask_mod applied everywhere, no full lists).
    ``compute_dq_write_order`` adds PyTorch's deterministic-dQ metadata, in ``dq_kv_order``
    (True: descending) -- carried for a GPU backward; the CPU backward is deterministic.
    """
    if not callable(mask_mod):
        raise InputError(
            f"mask_mod must be a function (b, h, q_idx, kv_idx) -> bool, got {mask_mod!r}"
        )
    if _positional_arguments(mask_mod) == 5:
        raise BlockListsError(
            "create_block_mask needs a mask_mod (b, h, q_idx, kv_idx) -> bool, got a function "
            "of 5 arguments (a score_mod?): pass it to flex_attention as score_mod instead"
        )
    if not isinstance(dq_kv_order, bool):
        raise InputError("dq_kv_order must be a bool when using create_block_mask")
    if device is None:
        device = torch.accelerator.current_accelerator() or "cpu"
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
    partial, full = torch.cat(partial, 2), torch.cat(full, 2)
    if not separate_full_blocks:
        partial, full = partial | full, None
    block_mask = BlockMask.from_dense_blocks(partial, full, (Q_LEN, KV_LEN), (bq, bk), mask_mod)
    if compute_dq_write_order:
        block_mask.dq_write_order, block_mask.dq_write_order_full = dq_write_order(
            block_mask, dq_kv_order
        )
        block_mask.dq_kv_order_spt = dq_kv_order
    return block_mask


def create_mask(
    mod_fn: Callable,
    B: int | None,
    H: int | None,
    Q_LEN: int,
    KV_LEN: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """The dense (B, H, Q_LEN, KV_LEN) boolean mask of a mask_mod -- or of a score_mod
    (5 arguments): False where it gives -inf on a score of 0 -- as PyTorch's function.
    B / H of None give 1; ``device`` None: the current accelerator, else the CPU.

    This evaluates the whole grid (what it is for: a dense mask for SDPA or a check);
    :func:`create_block_mask` never does."""
    if device is None:
        device = torch.accelerator.current_accelerator() or "cpu"
    batches, heads = B or 1, H or 1
    shape = (batches, heads, Q_LEN, KV_LEN)
    index = (
        index_range(0, batches, device).view(-1, 1, 1, 1),
        index_range(0, heads, device).view(1, -1, 1, 1),
        index_range(0, Q_LEN, device).view(1, 1, -1, 1),
        index_range(0, KV_LEN, device).view(1, 1, 1, -1),
    )
    if _positional_arguments(mod_fn) == 5:
        scores = torch.zeros(shape, device=device)
        return ~ModEvaluator(mod_fn, "score_mod")((scores,), index, shape).isneginf()
    return ModEvaluator(mod_fn, "mask_mod")((), index, shape).expand(shape).clone()


def _positional_arguments(fn: Callable) -> int:
    """The arguments ``fn`` needs (PyTorch tells a score_mod, 5, from a mask_mod, 4): its
    code's positional arguments less those with defaults (less ``self`` for a callable
    object); 4 where there is no code to read (a builtin)."""
    method = fn if hasattr(fn, "__code__") else type(fn).__call__.__get__(fn)
    code = getattr(method, "__code__", None)
    if code is None:
        return 4
    bound = 1 if hasattr(method, "__self__") else 0
    return code.co_argcount - len(getattr(method, "__defaults__", None) or ()) - bound


def as_block_mask(block_mask: object) -> BlockMask | None:
    """qkv's BlockMask for ``block_mask``: itself, or -- for PyTorch's own BlockMask (from
    its ``create_block_mask`` or ``BlockMask.from_kv_blocks``) -- the same block lists
    and mask_mod in qkv's class, read from its fields without evaluating the mask.  The
    result is kept on PyTorch's object and made again only when a field changes (decoding
    sets ``mask_mod`` and ``seq_lengths`` on a sliced mask every step), so a mask reused
    every step costs nothing after the first (nor do the kernel's plans kept on it).
    None for PyTorch's placeholder of "no mask"."""
    if isinstance(block_mask, BlockMask):
        return block_mask
    if not _is_torch_block_mask(block_mask):
        raise InputError(
            f"block_mask must be a BlockMask (qkv.create_block_mask or PyTorch's "
            f"create_block_mask), got {type(block_mask).__name__}"
        )
    if tuple(block_mask.BLOCK_SIZE) == (_TORCH_NO_MASK_BLOCK, _TORCH_NO_MASK_BLOCK):
        return None
    fields = block_mask.as_tuple(flatten=False)
    key = tuple(id(x) for x in fields)
    kept = getattr(block_mask, "_qkv_block_mask", None)
    if kept is not None and kept[0] == key:
        return kept[1]
    converted = BlockMask(
        *fields[:9], tuple(block_mask.BLOCK_SIZE), block_mask.mask_mod,
        dq_write_order=block_mask.dq_write_order,
        dq_write_order_full=block_mask.dq_write_order_full,
        dq_kv_order=block_mask.dq_kv_order, dq_kv_order_spt=block_mask.dq_kv_order_spt,
    )  # fmt: skip
    if getattr(block_mask.mask_mod, "__name__", "") == "_sliced_mask_mod_error":
        converted.mask_mod = sliced_mask_mod  # same refusal, one place to check it
    block_mask._qkv_block_mask = (key, converted, fields)  # fields: keeps the ids unique
    return converted


#: The BLOCK_SIZE of PyTorch's placeholder mask for a call without one.
_TORCH_NO_MASK_BLOCK = 1 << 30


def _is_torch_block_mask(obj: object) -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask as TorchBlockMask
    except ImportError:  # a torch without FlexAttention has no BlockMask to convert
        return False
    return isinstance(obj, TorchBlockMask)


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
