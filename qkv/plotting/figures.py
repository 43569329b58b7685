"""What every qkv plot shares: matplotlib without a window, and one way to write a figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["save_figure", "DPI"]

#: Resolution of every saved plot.
DPI = 110


def save_figure(figure, path: str | Path) -> Path:
    """Lay the figure out, write it to ``path`` (folders made as needed; the format follows
    the suffix), close it, and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path
