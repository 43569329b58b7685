"""Which blocks of attention a block mask computes: full, partial (masked per element) and
skipped, as one picture per mask (:class:`~qkv.functional.block_mask.BlockMask`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..functional.block_mask import BlockMask  # noqa: E402
from .figures import save_figure  # noqa: E402

__all__ = ["block_kinds", "plot_block_masks"]

#: skipped, partial, full
COLOURS = ("#f4f4f4", "#f0a04b", "#2f6db5")
KINDS = ("skipped", "partial (mask_mod per element)", "full (no mask)")


def block_kinds(block_mask: BlockMask, batch: int = 0, head: int = 0) -> np.ndarray:
    """(nQ, nK) ints: 0 where a block is skipped, 1 partial, 2 full (one batch and head)."""
    partial, full = block_mask.dense_blocks()
    b, h = min(batch, partial.shape[0] - 1), min(head, partial.shape[1] - 1)
    return (partial[b, h].int() + 2 * full[b, h].int()).numpy()


def plot_block_masks(masks: Mapping[str, BlockMask], path: str | Path) -> Path:
    """One panel per named mask: query blocks down, key blocks across, each block coloured
    by what the kernel does with it, the share of the grid skipped in the title (the legend
    sits in the first panel's upper right, empty under any causal mask)."""
    if not masks:
        raise ValueError("plot_block_masks needs at least one block mask")
    figure, axes = plt.subplots(1, len(masks), figsize=(4.2 * len(masks), 4.6), squeeze=False)
    for axis, (name, block_mask) in zip(axes[0], masks.items(), strict=True):
        (tq, tk), (bq, bk) = block_mask.seq_lengths, block_mask.BLOCK_SIZE
        axis.imshow(block_kinds(block_mask), cmap=ListedColormap(COLOURS), vmin=0, vmax=2)
        axis.set_title(f"{name}\n{block_mask.sparsity():.0f}% of the grid skipped", fontsize=10)
        axis.set_xlabel(f"key block ({bk} keys, {tk} in all)")
        axis.set_ylabel(f"query block ({bq} queries, {tq} in all)")
    handles = [Patch(color=c, label=k) for c, k in zip(COLOURS, KINDS, strict=True)]
    axes[0][0].legend(handles=handles, loc="upper right", fontsize=8)  # above a causal diagonal
    return save_figure(figure, path)
