"""Attention as pictures: alignment heatmaps (target x source) and per-word image overlays."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from .figures import as_array, save_figure  # noqa: E402

__all__ = ["plot_alignment", "plot_alignment_grid", "plot_image_attention"]


def _check_alignment(weights: np.ndarray, source: Sequence[str], target: Sequence[str]) -> None:
    if weights.ndim != 2:
        raise ValueError(
            f"alignment weights must be (T_target, T_source), got shape {weights.shape}"
        )
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"weights of shape {weights.shape} do not match {len(target)} target and "
            f"{len(source)} source tokens"
        )


def _draw(
    ax, weights: np.ndarray, source: Sequence[str], target: Sequence[str], title: str | None
) -> None:
    ax.imshow(
        weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-6), aspect="auto"
    )
    ax.set_xticks(range(len(source)), labels=list(source), rotation=90, fontsize=8)
    ax.set_yticks(range(len(target)), labels=list(target), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("generated")
    if title:
        ax.set_title(title, fontsize=9)


def plot_alignment(
    weights: Tensor | np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    *,
    title: str | None = None,
) -> Path:
    """Write a heatmap of one alignment: rows are generated tokens, columns source tokens.

    Shapes: weights (T_target, T_source), rows summing to 1.  Returns the PNG's path."""
    weights = as_array(weights)
    _check_alignment(weights, source_tokens, target_tokens)
    width = min(2.0 + 0.32 * len(source_tokens), 30.0)
    height = min(1.5 + 0.32 * len(target_tokens), 30.0)
    fig, ax = plt.subplots(figsize=(width, height))
    _draw(ax, weights, source_tokens, target_tokens, title)
    fig.colorbar(ax.images[0], ax=ax, fraction=0.04)
    return save_figure(fig, path)


def plot_alignment_grid(
    weights: Tensor | np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
) -> Path:
    """Several alignments side by side, e.g. every head of a layer.

    Shapes: weights (N, T_target, T_source)."""
    weights = as_array(weights)
    if weights.ndim != 3:
        raise ValueError(f"expected (N, T_target, T_source) weights, got shape {weights.shape}")
    count = weights.shape[0]
    columns = min(count, 4)
    rows = math.ceil(count / columns)
    cell = (1.5 + 0.25 * len(source_tokens), 1.5 + 0.25 * len(target_tokens))
    fig, axes = plt.subplots(
        rows, columns, figsize=(cell[0] * columns, cell[1] * rows), squeeze=False
    )
    for index, ax in enumerate(axes.flat):
        if index >= count:
            ax.axis("off")
            continue
        _check_alignment(weights[index], source_tokens, target_tokens)
        title = titles[index] if titles else f"head {index}"
        _draw(ax, weights[index], source_tokens, target_tokens, title)
    return save_figure(fig, path)


def plot_image_attention(
    image: Tensor | np.ndarray,
    words: Sequence[str],
    maps: Tensor | np.ndarray,
    path: str | Path,
    *,
    grid: tuple[int, int] | None = None,
) -> Path:
    """A strip: the image, then one panel per generated word with that step's attention
    over the image regions overlaid (upsampled and smoothed), the word under each panel.

    Shapes: image (3, H, W) in [0, 1] or (H, W, 3); maps (T, P) with P = grid rows x cols
    (a square grid when ``grid`` is None)."""
    picture = as_array(image)
    if picture.ndim == 3 and picture.shape[0] in (1, 3):
        picture = np.transpose(picture, (1, 2, 0))
    if picture.ndim != 3:
        raise ValueError(f"image must be (3, H, W) or (H, W, 3), got shape {picture.shape}")
    picture = np.clip(picture, 0.0, 1.0)
    maps = as_array(maps)
    if maps.ndim != 2 or maps.shape[0] != len(words):
        raise ValueError(f"maps must be (T, P) with T = {len(words)} words, got shape {maps.shape}")
    if grid is None:
        side = int(round(math.sqrt(maps.shape[1])))
        grid = (side, side)
    if grid[0] * grid[1] != maps.shape[1]:
        raise ValueError(f"{maps.shape[1]} regions do not form a {grid[0]}x{grid[1]} grid")
    height, width = picture.shape[:2]
    panels = len(words) + 1
    fig, axes = plt.subplots(1, panels, figsize=(2.0 * panels, 2.3), squeeze=False)
    axes = axes[0]
    axes[0].imshow(picture)
    axes[0].set_xlabel("image")
    for ax, word, region_weights in zip(axes[1:], words, maps):
        overlay = _upsample(region_weights.reshape(grid), height, width)
        ax.imshow(picture)
        ax.imshow(overlay, cmap="jet", alpha=0.5, vmin=0.0, vmax=max(float(overlay.max()), 1e-6))
        ax.set_xlabel(word, fontsize=10)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    return save_figure(fig, path)


def _upsample(grid_weights: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear upsampling of a region grid to the image size: a smooth map, not blocks."""
    tensor = torch.from_numpy(np.ascontiguousarray(grid_weights))[None, None]
    smooth = torch.nn.functional.interpolate(
        tensor, size=(height, width), mode="bilinear", align_corners=False
    )
    return smooth[0, 0].numpy()
