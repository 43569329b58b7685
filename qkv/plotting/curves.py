"""Scores as line plots: BLEU against source-sentence length, one curve per model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_bleu_by_length"]


def plot_bleu_by_length(
    buckets: Sequence[str],
    curves: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    counts: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG of BLEU per source-length bucket, every model's curve on one figure.

    buckets: the x-axis labels, e.g. ``["0-10", "11-20", "21-30", "31-40", "41+"]``.
    curves: model name -> one BLEU per bucket (NaN for an empty bucket leaves a gap).
    counts: sentences per bucket, shown under the labels.
    """
    if not buckets:
        raise ValueError("no length buckets to plot")
    if not curves:
        raise ValueError("no curves to plot: give at least one model's BLEU per bucket")
    for name, values in curves.items():
        if len(values) != len(buckets):
            raise ValueError(f"curve {name!r} has {len(values)} values for {len(buckets)} buckets")
    if counts is not None and len(counts) != len(buckets):
        raise ValueError(f"got {len(counts)} counts for {len(buckets)} buckets")
    labels = list(buckets)
    if counts is not None:
        labels = [f"{label}\n({count})" for label, count in zip(buckets, counts)]
    figure, ax = plt.subplots(figsize=(6.4, 4.0))
    positions = range(len(buckets))
    for name, values in curves.items():
        ax.plot(positions, [math.nan if v is None else v for v in values], marker="o", label=name)
    ax.set_xticks(positions, labels=labels)
    ax.set_xlabel("source length in words" + (" (sentences)" if counts is not None else ""))
    ax.set_ylabel("BLEU")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
