"""Where the captioner's regions lie in the image, and how much attention falls in a box.

Region p = row * grid + column (the row-by-row flattening of ``qkv.layers.cnn``) stands
for the image cell [column * s, (column + 1) * s) x [row * s, (row + 1) * s) with
s = image_size / grid pixels.  The attention mass inside a box counts each region's weight
in proportion to the share of its cell that the box covers; spreading the weights evenly
over the regions puts exactly the box's share of the image inside it, the chance level
(:func:`box_area_fraction`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["cell_boxes", "attention_mass_in_box", "box_area_fraction"]

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels, x1 and y1 exclusive


def cell_boxes(image_size: int, grid: int) -> list[Box]:
    """The pixel cell of each of the grid * grid regions, in region order."""
    if image_size < 1 or grid < 1:
        raise ValueError(f"image_size={image_size} and grid={grid} must be positive")
    side = image_size / grid
    return [
        (column * side, row * side, (column + 1) * side, (row + 1) * side)
        for row in range(grid)
        for column in range(grid)
    ]


def _overlap(a: Sequence[float], b: Sequence[float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0.0) * max(height, 0.0)


def _check_box(box: Sequence[float]) -> None:
    if len(box) != 4 or box[2] < box[0] or box[3] < box[1]:
        raise ValueError(f"box={tuple(box)} must be (x0, y0, x1, y1) with x0 <= x1, y0 <= y1")


def attention_mass_in_box(
    weights: Tensor | Sequence[float], box: Sequence[float], image_size: int, grid: int
) -> float:
    """sum_p alpha_p * |cell_p intersect box| / |cell_p|: the attention inside ``box``.

    Shapes: weights (P,) with P = grid * grid, in region order."""
    _check_box(box)
    weights = torch.as_tensor(weights, dtype=torch.float64).flatten()
    if weights.numel() != grid * grid:
        raise ValueError(
            f"weights hold {weights.numel()} values, expected grid * grid = {grid * grid}"
        )
    cells = cell_boxes(image_size, grid)
    cell_area = (image_size / grid) ** 2
    covered = torch.tensor([_overlap(cell, box) / cell_area for cell in cells], dtype=torch.float64)
    return float((weights * covered).sum())


def box_area_fraction(box: Sequence[float], image_size: int) -> float:
    """The share of the image that ``box`` covers (the part inside the image): the attention
    mass a uniform alpha puts inside the box."""
    _check_box(box)
    if image_size < 1:
        raise ValueError(f"image_size={image_size} must be positive")
    return _overlap(box, (0.0, 0.0, image_size, image_size)) / image_size**2
