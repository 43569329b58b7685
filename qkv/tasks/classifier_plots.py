"""Pictures of a classifier's attention: the weights of attention pooling over the frames of
clips, and the maps of feature-map self-attention for a few query positions."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..errors import InputError
from ..explore import classifier_attention
from ..plotting import plot_alignment_grid, plot_frame_attention, plot_image_attention
from .classifier import (
    ClassificationData,
    ClassifierScores,
    classification_data,
    classifier_checkpoint,
    evaluate_classifier,
)

__all__ = ["plot_classifier_attention", "query_positions", "classify_and_plot"]


def classify_and_plot(
    checkpoint: str | Path,
    *,
    split: str = "test",
    limit: int | None = None,
    device: str = "cpu",
    attention_out: str | Path | None = None,
    count: int = 4,
) -> tuple[ClassifierScores, list[Path]]:
    """Score a trained classifier on a split of its data (the first ``limit`` items) and,
    with ``attention_out``, draw the attention of its first ``count`` items."""
    for name, value in (("limit", limit), ("count", count)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise InputError(f"{name}={value} must be a positive number of items", fields=(name,))
    if attention_out is not None and Path(attention_out).suffix.lower() != ".png":
        raise InputError(
            f"attention_out={str(attention_out)!r} must be a .png file", fields=("attention_out",)
        )
    found, setup = classifier_checkpoint(checkpoint, device=device)
    model = found.model
    data = classification_data(setup, split, limit)
    scores = evaluate_classifier(model, data)
    paths = []
    if attention_out is not None:
        paths = plot_classifier_attention(model, data, attention_out, count=count)
    return scores, paths


def query_positions(grid: int) -> list[tuple[int, int]]:
    """A few positions of a grid x grid map to show: the centre, above, below, left of it."""
    middle = grid // 2
    return [(middle, middle), (1, middle), (grid - 2, middle), (middle, 1)]


@torch.no_grad()
def plot_classifier_attention(
    model: nn.Module, data: ClassificationData, path: str | Path, *, count: int = 4
) -> list[Path]:
    """Draw the attention of the first ``count`` items of ``data``: frame weights for a
    clip classifier pooling by attention (one PNG, one row per clip, the marked frame
    outlined); the last block's heads over the frames for a frame tagger (frame x frame,
    one PNG per clip); else the feature-map self-attention of ``count`` pictures (first
    frames) for the positions of :func:`query_positions`, one PNG per picture.  Several
    PNGs are named ``<stem>-<i>.png``."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InputError(
            f"attention_out={str(path)!r} must be a .png file", fields=("attention_out",)
        )
    model.eval()
    device = next(model.parameters()).device
    batch = data.collate(list(range(min(count, len(data))))).to(device)
    logits, attention = classifier_attention(model, batch.source)  # as the explorer's page
    if "frames" in attention:
        guesses = logits[:, 0, 1:].argmax(dim=-1).tolist()  # class ids (no <pad>)
        weights = attention["frames"][0][:, 0, 0]  # (B, T)
        clips = [data.items.frames(i).float() / 255.0 for i in range(len(weights))]
        marked = [data.items.clips[i].marked for i in range(len(weights))]
        titles = [
            f"{data.classes[data.items.clips[i].label]} (predicted {data.classes[guesses[i]]}): "
            f"{float(weights[i, marked[i]]):.0%} of the weight on the marked frame"
            for i in range(len(weights))
        ]
        rows = [w[: len(clip)] for w, clip in zip(weights, clips)]
        return [plot_frame_attention(clips, rows, path, titles=titles, highlight=marked)]
    if "self" in attention:
        return _plot_tagger(attention["self"][-1], data, path, count)
    if not model.config.feature_attention:
        raise InputError(
            "this model has neither attention pooling over frames nor feature-map attention "
            "to draw; train it with pool='attention' (clips) or feature_attention",
            fields=("pool", "feature_attention"),
        )
    grid = model.config.grid
    pictures = batch.source if batch.source.dim() == 4 else batch.source[:, 0]  # first frames
    _, attention = model.frames(pictures, need_attention=True)
    maps = attention["feature"][0].cpu()  # (N, P, P)
    queries = query_positions(grid)
    out = []
    for index in range(min(count, len(pictures))):
        target = _numbered(path, index, count)
        picture = pictures[index].cpu().expand(3, -1, -1)
        rows = maps[index, [r * grid + c for r, c in queries]]  # (Q, P)
        words = [f"query ({r}, {c})" for r, c in queries]
        out.append(plot_image_attention(picture, words, rows, target, grid=(grid, grid)))
    return out


def _numbered(path: Path, index: int, count: int) -> Path:
    return path if count == 1 else path.with_name(f"{path.stem}-{index}{path.suffix}")


def _plot_tagger(weights, data: ClassificationData, path: Path, count: int) -> list[Path]:
    """weights (B, H, T, T) of the tagger's last block; frames named by class, * = occluded."""
    out = []
    for index in range(min(count, len(weights))):
        clip = data.items.clips[index]
        names = [
            f"{t} {data.classes[c]}{'*' if box is not None else ''}"
            for t, (c, box) in enumerate(zip(clip.labels, clip.occluders))
        ]
        heads = weights[index, :, : len(clip), : len(clip)]  # (H, T, T)
        target = _numbered(path, index, count)
        out.append(plot_alignment_grid(heads, names, names, target))
    return out
