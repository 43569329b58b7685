"""Line plots: BLEU against source-sentence length (one curve per model), and a training
run's loss and BLEU curves from its log."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, never a window: works on a headless machine
import matplotlib.pyplot as plt  # noqa: E402

from ..errors import DataError, MissingFileError  # noqa: E402
from .figures import save_figure  # noqa: E402

__all__ = ["plot_bleu_by_length", "plot_training_log"]


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
    return save_figure(figure, path)


def plot_training_log(
    log: str | Path | Sequence[dict], path: str | Path, *, title: str | None = None
) -> Path:
    """Write a PNG of a training run's curves from its ``log.jsonl`` (a path or the parsed
    records): training loss (per log window) and validation loss against the update step,
    and, when the run measured it, validation BLEU on a second axis.
    """
    records = _read_log(log) if isinstance(log, (str, Path)) else list(log)
    train = [(r["step"], r["loss"]) for r in records if r.get("event") == "train" and "loss" in r]
    valid = [r for r in records if r.get("event") == "valid"]
    if not train and not valid:
        raise DataError(
            "the log has no 'train' or 'valid' records to plot; train longer than log_every "
            "steps, or check that this is a qkv log.jsonl"
        )
    figure, ax = plt.subplots(figsize=(6.4, 4.0))
    if train:
        ax.plot(*zip(*train), label="training loss", color="tab:blue", alpha=0.8)
    losses = [(r["step"], r["valid_loss"]) for r in valid if "valid_loss" in r]
    if losses:
        ax.plot(*zip(*losses), marker="o", label="validation loss", color="tab:orange")
    ax.set_xlabel("update step")
    ax.set_ylabel("loss (nats per token)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    bleu = [(r["step"], r["bleu"]) for r in valid if r.get("bleu") is not None]
    if bleu:
        twin = ax.twinx()
        twin.plot(*zip(*bleu), marker="s", color="tab:green", label="validation BLEU")
        twin.set_ylabel("BLEU")
        twin.set_ylim(bottom=0)
        more_handles, more_labels = twin.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.legend(handles, labels, loc="upper center", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(figure, path)


def _read_log(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / "log.jsonl"
    if not path.is_file():
        raise MissingFileError(f"no training log at {path}: give a run folder or its log.jsonl")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a qkv log.jsonl (not UTF-8 text)") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {number} is not JSON ({error.msg})") from None
    return records
