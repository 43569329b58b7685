"""Plots read back as pixels: the attention, curves and cells land where the data puts them;
bad shapes are refused clearly."""

import json

import numpy as np
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


def _pixels(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image.convert("RGB")).astype(int)


def _box(mask):
    """(top, left, bottom, right) of the True pixels, bottom and right exclusive."""
    rows, columns = np.nonzero(mask)
    return rows.min(), columns.min(), rows.max() + 1, columns.max() + 1


def _rows_near(mask, column):
    """The rows holding a True pixel within two columns of ``column``."""
    return np.flatnonzero(mask[:, column - 2 : column + 3].any(axis=1))


def _near(pixels, rgb, tolerance=12):
    return (np.abs(pixels - np.array(rgb)) <= tolerance).all(axis=-1)


@pytest.mark.parametrize("row, column", [(0, 0), (2, 4), (3, 1)])
def test_the_heatmaps_brightest_cell_is_where_the_weight_is(tmp_path, row, column):
    """One weight of 1 among zeros: the PNG's only yellow (viridis' top colour) block sits in
    that cell of the purple (bottom colour) heatmap, counted from the top left."""
    weights = torch.zeros(4, 6)
    weights[row, column] = 1.0
    path = plot_alignment(weights, list("source"), ["w1", "w2", "w3", "</s>"], tmp_path / "a.png")
    pixels = _pixels(path)
    hot, cold = _near(pixels, (253, 231, 37)), _near(pixels, (68, 1, 84))
    # the heatmap is the first block of columns holding the map's colours; the colour bar
    # (both colours too) is a second block further right
    columns = np.flatnonzero((hot | cold).any(axis=0))
    gaps = np.flatnonzero(np.diff(columns) > 1)
    first_block = columns[: gaps[0] + 1] if len(gaps) else columns
    in_map = np.zeros_like(hot)
    in_map[:, first_block] = True
    hot, cold = hot & in_map, cold & in_map
    top, left, bottom, right = _box(hot | cold)  # the heatmap's area
    cell_height, cell_width = (bottom - top) / 4, (right - left) / 6
    hot_top, hot_left, hot_bottom, hot_right = _box(hot)
    assert (hot_bottom - hot_top) == pytest.approx(cell_height, rel=0.1)
    assert (hot_right - hot_left) == pytest.approx(cell_width, rel=0.1)
    centre = ((hot_top + hot_bottom) / 2 - top, (hot_left + hot_right) / 2 - left)
    assert (int(centre[0] // cell_height), int(centre[1] // cell_width)) == (row, column)


@pytest.mark.parametrize("region", [0, 6, 13])
def test_the_image_overlay_is_reddest_over_the_attended_region(tmp_path, region):
    """A black image, all attention on one region of a 4 x 4 grid: the overlay's reddest
    pixel (jet's top colour) lies in that region's cell of the word's panel."""
    maps = torch.zeros(1, 16)
    maps[0, region] = 1.0
    path = plot_image_attention(torch.zeros(3, 64, 64), ["square"], maps, tmp_path / "o.png")
    pixels = _pixels(path)
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    navy = (blue > 40) & (red < 20) & (green < 20)  # jet's bottom colour over black
    top, left, bottom, right = _box(navy)  # the word's panel (the image panel is black)
    redness = red - blue
    y, x = np.unravel_index(redness.argmax(), redness.shape)
    cell = (int((y - top) / (bottom - top) * 4), int((x - left) / (right - left) * 4))
    assert cell == divmod(region, 4)


def _hot_cell(hot, cold, columns, rows, cells):
    """(row, column) of the yellow cell inside the heatmap drawn in ``columns`` of the image."""
    in_map = np.zeros_like(hot)
    in_map[:, columns] = True
    top, left, bottom, right = _box((hot | cold) & in_map)
    hot_top, hot_left, hot_bottom, hot_right = _box(hot & in_map)
    centre = ((hot_top + hot_bottom) / 2 - top, (hot_left + hot_right) / 2 - left)
    return int(centre[0] / (bottom - top) * rows), int(centre[1] / (right - left) * cells)


def test_each_panel_of_the_grid_shows_its_own_head(tmp_path):
    """Three heads, each with all its weight on another cell: the grid's panels, left to
    right, have their yellow cell where their own head put the weight."""
    weights = torch.zeros(3, 2, 4)
    attended = [(0, 0), (1, 1), (0, 3)]
    for head, (row, column) in enumerate(attended):
        weights[head, row, column] = 1.0
    path = plot_alignment_grid(weights, list("abcd"), ["x", "y"], tmp_path / "g.png")
    pixels = _pixels(path)
    hot, cold = _near(pixels, (253, 231, 37)), _near(pixels, (68, 1, 84))
    columns = np.flatnonzero((hot | cold).any(axis=0))
    panels = np.split(columns, np.flatnonzero(np.diff(columns) > 1) + 1)
    assert len(panels) == 3
    assert [_hot_cell(hot, cold, panel, 2, 4) for panel in panels] == attended


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
    pixels = _pixels(path)
    blue, orange = _near(pixels, (31, 119, 180), 20), _near(pixels, (255, 127, 14), 20)
    columns = np.flatnonzero(blue.any(axis=0))
    first, last = columns.min(), columns.max()  # the rnn curve's first and last markers
    assert _rows_near(blue, first).mean() < _rows_near(blue, last).mean()  # 20 above 5: it falls
    assert _rows_near(orange, first).mean() < _rows_near(blue, first).mean()  # 22 above 20
    assert len(_rows_near(orange, last)) == 0  # the empty bucket (NaN) leaves a gap
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
    pixels = _pixels(plot_training_log(tmp_path, tmp_path / "curves.png"))
    # training loss in tab:blue at alpha 0.8, validation loss tab:orange, BLEU tab:green
    for rgb, falls in (((76, 146, 195), True), ((255, 127, 14), True), ((44, 160, 44), False)):
        curve = _near(pixels, rgb, 20)
        columns = np.flatnonzero(curve.any(axis=0))
        first, last = columns.min(), columns.max()  # the curve's first and last points
        higher_first = _rows_near(curve, first).mean() < _rows_near(curve, last).mean()
        assert higher_first == falls, rgb  # the losses fall, BLEU rises (rows count down)
    (tmp_path / "bad.jsonl").write_text('{"event": "train"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        plot_training_log(tmp_path / "bad.jsonl", tmp_path / "x.png")
    with pytest.raises(ValueError, match="no 'train' or 'valid' records"):
        plot_training_log([{"event": "end"}], tmp_path / "y.png")
    with pytest.raises(FileNotFoundError, match="no training log"):
        plot_training_log(tmp_path / "missing", tmp_path / "z.png")
