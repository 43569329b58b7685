"""What every qkv plot shares: matplotlib without a window, one way to turn weights or
images into arrays, and one way to write a figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from torch import Tensor  # noqa: E402

from .fonts import use_label_fonts  # noqa: E402

__all__ = ["as_array", "save_figure", "DPI"]

#: Resolution of every saved plot.
DPI = 110


def save_figure(figure, path: str | Path) -> Path:
    """Lay the figure out, write it to ``path`` (folders made as needed; the format follows
    the suffix), close it, and return the path.  Labels in scripts the default font lacks
    (Chinese, Japanese, Korean) are drawn with a font that has them (``qkv.plotting.fonts``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    use_label_fonts(figure)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def as_array(values: Tensor | np.ndarray) -> np.ndarray:
    """Weights or an image as a float32 numpy array, from a tensor (detached, on the CPU, any
    dtype) or anything ``np.asarray`` takes."""
    if isinstance(values, Tensor):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float32)
