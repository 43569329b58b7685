"""Attention plots are written as real PNG files, and bad shapes are refused clearly."""

import json

import pytest
import torch
from PIL import Image

from qkv.plotting import (
    plot_alignment,
    plot_alignment_grid,
    plot_bleu_by_length,
    plot_image_attention,
    plot_training_log,
)


def test_alignment_heatmap_is_a_png(tmp_path):
    weights = torch.softmax(torch.randn(4, 6), -1)
    path = plot_alignment(
        weights, list("source"), ["w1", "w2", "w3", "</s>"], tmp_path / "a.png", title="t"
    )
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 100


def test_grid_and_overlay_are_pngs(tmp_path):
    grid = plot_alignment_grid(
        torch.softmax(torch.randn(3, 2, 4), -1), list("abcd"), ["x", "y"], tmp_path / "g.png"
    )
    overlay = plot_image_attention(
        torch.rand(3, 32, 32),
        ["a", "red", "square"],
        torch.softmax(torch.randn(3, 16), -1),
        tmp_path / "o.png",
    )
    for path in (grid, overlay):
        with Image.open(path) as image:
            assert image.format == "PNG"


def test_mismatched_labels_and_grids_raise():
    with pytest.raises(ValueError, match="do not match 2 target and 3 source"):
        plot_alignment(torch.rand(2, 4), list("abc"), ["x", "y"], "/tmp/never.png")
    with pytest.raises(ValueError, match="do not form a 3x3 grid"):
        plot_image_attention(
            torch.rand(3, 8, 8), ["a"], torch.rand(1, 8), "/tmp/never.png", grid=(3, 3)
        )


def test_bleu_by_length_plot_is_a_png_and_checks_its_curves(tmp_path):
    buckets = ["0-10", "11-20", "21+"]
    curves = {"rnn": [20.0, 12.0, 5.0], "rnn-attention": [22.0, 21.0, float("nan")]}
    path = plot_bleu_by_length(buckets, curves, tmp_path / "c.png", counts=[5, 3, 0], title="t")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 100
    with pytest.raises(ValueError, match="has 2 values for 3 buckets"):
        plot_bleu_by_length(buckets, {"rnn": [1.0, 2.0]}, tmp_path / "d.png")
    with pytest.raises(ValueError, match="no curves"):
        plot_bleu_by_length(buckets, {}, tmp_path / "e.png")


def test_training_log_plot_reads_a_run_log_and_refuses_a_bad_one(tmp_path):
    records = [
        {"event": "train", "step": 10, "loss": 5.0},
        {"event": "valid", "step": 10, "valid_loss": 4.5, "bleu": 3.0},
        {"event": "train", "step": 20, "loss": 4.0},
        {"event": "valid", "step": 20, "valid_loss": 4.0, "bleu": 6.0},
        {"event": "end", "step": 20},
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with Image.open(plot_training_log(tmp_path, tmp_path / "curves.png")) as image:
        assert image.format == "PNG"
    (tmp_path / "bad.jsonl").write_text('{"event": "train"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        plot_training_log(tmp_path / "bad.jsonl", tmp_path / "x.png")
    with pytest.raises(ValueError, match="no 'train' or 'valid' records"):
        plot_training_log([{"event": "end"}], tmp_path / "y.png")
    with pytest.raises(FileNotFoundError, match="no training log"):
        plot_training_log(tmp_path / "missing", tmp_path / "z.png")
