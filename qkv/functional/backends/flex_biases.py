"""The additive masks of the tile kernel's partial tiles (:mod:`.flex_kernel`): 0 where a
query may attend, -inf where not, made from the mask_mod once per distinct tile and met
again by the backward."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from ..block_mask import index_range

__all__ = ["BIAS_ELEMENTS", "TileBiases", "bundle_biases"]

#: Elements of distinct partial-tile masks one call keeps for its backward.
BIAS_ELEMENTS = 1 << 21


class TileBiases:
    """The additive masks of one call's partial tiles (0 where a query may attend, -inf
    where not), made once in the forward and met again in the backward.  Tiles whose masks
    are equal -- a window's or a causal diagonal's, repeated down the diagonal -- share one
    tensor; at most ``BIAS_ELEMENTS`` distinct elements are kept, the rest made again.

    Adding a small broadcast bias costs a twentieth of ``masked_fill_`` with a broadcast
    boolean on the same tile."""

    def __init__(self) -> None:
        self.by_tile: dict[tuple, torch.Tensor] = {}
        self.by_bundle: dict[tuple, dict[int, torch.Tensor]] = {}  # the kernel's, per bundle
        self.distinct: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.elements = 0

    def get(self, tile: tuple, keep_fn: Callable[[], torch.Tensor], dtype: torch.dtype):
        """The bias of ``tile`` (a hashable key), from ``keep_fn()`` the first time."""
        bias = self.by_tile.get(tile)
        if bias is None:
            keep = keep_fn()
            bias = self._shared(keep, dtype)
            if bias is None:
                return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill_(
                    ~keep, float("-inf")
                )
            self.by_tile[tile] = bias
        return bias

    def _shared(self, keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """The kept bias equal to ``keep``'s, kept anew if the budget allows, else None."""
        key = (tuple(keep.shape), int(keep.sum()) if keep.device.type == "cpu" else None)
        same = self.distinct.setdefault(key, [])
        for other, bias in same:
            if keep.device.type == "cpu" and torch.equal(other, keep):
                return bias
        if self.elements + keep.numel() > BIAS_ELEMENTS:
            return None
        self.elements += keep.numel()
        bias = torch.zeros(keep.shape, dtype=dtype, device=keep.device)
        same.append((keep, bias.masked_fill_(~keep, float("-inf"))))
        return bias


def bundle_biases(slices, plan, bundle, dtype) -> dict:
    """Each partial block's additive mask for the bundle, (n or 1, ...) with the mask's
    broadcast shape: one tensor where every block's mask is the same.  Kept for the
    backward where no part needed a stack of per-block masks (those are made again)."""
    key = (id(slices.group), id(bundle))
    biases = plan.biases.by_bundle.get(key)
    if biases is not None:
        return biases
    biases, shared = {}, True
    shape = (slices.nb, slices.nkv, slices.group.per_kv, bundle.rows)
    for run in bundle.runs:
        for part in run.partial:
            per_block = []
            for k in range(bundle.count):
                rows = bundle.start + k * bundle.step
                cols = slice(part.start + k * bundle.step, part.stop + k * bundle.step)
                keep = functools.partial(_keep, slices, plan, rows, cols, shape)
                per_block.append(plan.biases.get((id(slices.group), rows, cols.start), keep, dtype))
            same = all(b is per_block[0] for b in per_block)
            biases[part.start] = per_block[0][None] if same else torch.stack(per_block)
            shared = shared and same
    if shared:
        plan.biases.by_bundle[key] = biases
    return biases


def _keep(slices, plan, rows: int, cols: slice, shape: tuple) -> Tensor:
    """The mask_mod on one query block's tile (rows on, ``cols``), (nb, nkv, G, r, c)."""
    index = _block_index(slices, rows, shape[-1], cols)
    return plan.mask((), index, (*shape, cols.stop - cols.start))


def _block_index(slices, rows: int, count: int, cols: slice) -> tuple[Tensor, ...]:
    """(b, h, q_idx, kv_idx) of one query block's tile, broadcasting to (nb, nkv, G, r, c)."""
    device = slices.heads.device
    q = index_range(rows, rows + count, device).view(1, 1, 1, -1, 1)
    kv = index_range(cols.start, cols.stop, device).view(1, 1, 1, 1, -1)
    h = slices.heads.view(1, slices.nkv, -1, 1, 1)
    return slices.batches.view(-1, 1, 1, 1, 1), h, q, kv
