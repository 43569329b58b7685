"""Attention over the frames of clips: one row per clip, the frames as thumbnails with each
frame's pooling weight under it and the weight drawn as a bar."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from torch import Tensor  # noqa: E402

from .figures import as_array  # noqa: E402

__all__ = ["plot_frame_attention"]


def plot_frame_attention(
    clips: Sequence[Tensor | np.ndarray],
    weights: Sequence[Tensor | np.ndarray],
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    highlight: Sequence[int | None] | None = None,
) -> Path:
    """Rows of frames with their attention weights; a frame in ``highlight`` (per clip, e.g.
    the marked frame) gets a red frame around its thumbnail.

    Shapes: clips[i] (T_i, 1, S, S) or (T_i, S, S) in [0, 1]; weights[i] (T_i,)."""
    if len(clips) != len(weights) or not clips:
        raise ValueError(f"need as many weight rows as clips, got {len(clips)}, {len(weights)}")
    longest = max(len(clip) for clip in clips)
    fig, axes = plt.subplots(
        2 * len(clips),
        longest,
        figsize=(0.9 * longest, 2.0 * len(clips)),
        squeeze=False,
        gridspec_kw={"height_ratios": [3, 1] * len(clips)},
    )
    for row, (clip, row_weights) in enumerate(zip(clips, weights)):
        frames, values = as_array(clip), as_array(row_weights)
        frames = frames.reshape(len(frames), *frames.shape[-2:])
        if len(values) != len(frames):
            raise ValueError(f"clip {row}: {len(frames)} frames but {len(values)} weights")
        marked = highlight[row] if highlight is not None else None
        for t in range(longest):
            image_ax, bar_ax = axes[2 * row, t], axes[2 * row + 1, t]
            for ax in (image_ax, bar_ax):
                ax.set_xticks([])
                ax.set_yticks([])
            if t >= len(frames):
                image_ax.axis("off")
                bar_ax.axis("off")
                continue
            image_ax.imshow(frames[t], cmap="gray", vmin=0.0, vmax=1.0)
            if t == marked:
                for spine in image_ax.spines.values():
                    spine.set_edgecolor("red")
                    spine.set_linewidth(2.5)
            bar_ax.bar([0], [values[t]], color="tab:orange", width=0.8)
            bar_ax.set_ylim(0, 1)
            bar_ax.set_xlim(-0.6, 0.6)
            bar_ax.set_xlabel(f"{values[t]:.2f}", fontsize=7, labelpad=1)
        if titles is not None:
            axes[2 * row, 0].set_title(titles[row], fontsize=8, loc="left")
    fig.subplots_adjust(wspace=0.15, hspace=0.35)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
