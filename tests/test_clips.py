"""The generated clips and the Fashion-MNIST reader they draw from."""

import gzip

import numpy as np
import pytest
import torch

from qkv.data import fashion_mnist
from qkv.data.clips import (
    MARKER_WIDTH,
    OCCLUDER_LEVEL,
    ClipSet,
    clip_split,
    make_clips,
    render_clip,
)
from qkv.data.fashion_mnist import load_fashion_mnist, read_idx
from qkv.errors import DataError, MissingFileError

INSTALLED = fashion_mnist.FASHION_MNIST_DIR.joinpath("t10k-labels-idx1-ubyte.gz").is_file()
needs_fashion_mnist = pytest.mark.skipif(
    not INSTALLED, reason="Debian dataset-fashion-mnist is not installed (apt-get install it)"
)
LABELS = np.arange(300) % 10  # a synthetic pool: image i is of class i % 10


def test_clips_are_deterministic_and_streams_differ():
    first = make_clips(LABELS, range(300), task="clip", count=20, seed=0, stream=0)
    again = make_clips(LABELS, range(300), task="clip", count=20, seed=0, stream=0)
    other = make_clips(LABELS, range(300), task="clip", count=20, seed=0, stream=1)
    assert first == again and first != other


def test_a_clip_has_one_marked_frame_whose_class_is_the_label_among_other_classes():
    for clip in make_clips(LABELS, range(300), task="clip", count=50, seed=3, stream=0):
        assert 8 <= len(clip) <= 16 and clip.marked is not None
        assert clip.labels[clip.marked] == clip.label
        others = [c for t, c in enumerate(clip.labels) if t != clip.marked]
        assert clip.label not in others
        assert [LABELS[i] for i in clip.frames] == list(clip.labels)


def test_per_frame_clips_come_in_runs_with_some_frames_occluded():
    clips = make_clips(LABELS, range(300), task="per-frame", count=200, seed=0, stream=0)
    occluded = sum(box is not None for clip in clips for box in clip.occluders)
    frames = sum(len(clip) for clip in clips)
    assert 0.2 < occluded / frames < 0.4
    for clip in clips:
        assert clip.marked is None and [LABELS[i] for i in clip.frames] == list(clip.labels)
        runs = 1 + sum(a != b for a, b in zip(clip.labels, clip.labels[1:]))
        assert runs <= len(clip) / 2 + 1  # runs of 2-5, the last one maybe cut


def test_render_draws_the_marker_and_the_occluders():
    images = np.zeros((300, 28, 28), dtype=np.uint8)
    clip = make_clips(LABELS, range(300), task="clip", count=1, seed=0, stream=0)[0]
    frames = render_clip(clip, images)
    assert frames.shape == (len(clip), 1, 28, 28) and frames.dtype == torch.uint8
    marked = frames[clip.marked, 0]
    assert (marked[:MARKER_WIDTH] == 255).all() and (marked[:, -MARKER_WIDTH:] == 255).all()
    assert marked[MARKER_WIDTH:-MARKER_WIDTH, MARKER_WIDTH:-MARKER_WIDTH].sum() == 0
    assert frames.sum() == marked.sum()  # only the marked frame is changed
    runs = make_clips(LABELS, range(300), task="per-frame", count=5, seed=0, stream=0)
    clip = next(c for c in runs if any(c.occluders))
    frames = render_clip(clip, images)
    t = next(t for t, box in enumerate(clip.occluders) if box is not None)
    x0, y0, side = clip.occluders[t]
    assert (frames[t, 0, y0 : y0 + side, x0 : x0 + side] == OCCLUDER_LEVEL).all()


def test_clip_options_are_checked():
    with pytest.raises(DataError, match="task"):
        make_clips(LABELS, range(300), task="video", count=1, seed=0, stream=0)
    with pytest.raises(DataError, match="two classes"):
        make_clips(np.zeros(5, dtype=np.uint8), range(5), task="clip", count=1, seed=0, stream=0)


def _write_idx(path, magic, array):
    header = magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def test_read_idx_reads_images_and_labels_and_rejects_a_truncated_file(tmp_path):
    images = np.arange(2 * 3 * 4).reshape(2, 3, 4) % 256
    _write_idx(tmp_path / "i.gz", 2051, images)
    _write_idx(tmp_path / "l.gz", 2049, np.array([3, 7]))
    assert np.array_equal(read_idx(tmp_path / "i.gz"), images)
    assert np.array_equal(read_idx(tmp_path / "l.gz"), [3, 7])
    with gzip.open(tmp_path / "bad.gz", "wb") as handle:
        handle.write((2051).to_bytes(4, "big") + bytes(12) + bytes(5))
    with pytest.raises(DataError, match="truncated"):
        read_idx(tmp_path / "bad.gz")


def test_a_missing_install_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("QKV_FASHION_MNIST", str(tmp_path / "nowhere"))
    with pytest.raises(MissingFileError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist("train")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("QKV_FASHION_MNIST", str(tmp_path / "empty"))
    with pytest.raises(MissingFileError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist("test")
    with pytest.raises(FileNotFoundError):  # MissingFileError is also a FileNotFoundError
        load_fashion_mnist("test")


@needs_fashion_mnist
def test_the_real_files_read_as_documented():
    images, labels = load_fashion_mnist("train")
    assert images.shape == (60000, 28, 28) and labels.shape == (60000,)
    assert np.bincount(labels).tolist() == [6000] * 10
    images, labels = load_fashion_mnist("test")
    assert images.shape == (10000, 28, 28) and np.bincount(labels).tolist() == [1000] * 10


@needs_fashion_mnist
@pytest.mark.parametrize("task", ["clip", "per-frame"])
def test_real_splits_are_deterministic_and_draw_from_disjoint_images(task):
    train, valid, test = (clip_split(task, s, size=300) for s in ("train", "valid", "test"))
    assert isinstance(train, ClipSet) and len(train) == 300
    train_ids = {i for clip in train.clips for i in clip.frames}
    valid_ids = {i for clip in valid.clips for i in clip.frames}
    assert max(train_ids) < 55000 <= min(valid_ids)  # the same file, disjoint ranges
    assert test.images.shape[0] == 10000 and train.images.shape[0] == 60000  # another file
    _, labels = load_fashion_mnist("train")
    assert all(labels[i] == c for clip in train.clips for i, c in zip(clip.frames, clip.labels))
    again = make_clips(
        load_fashion_mnist("train")[1], range(55000), task=task, count=300, seed=0, stream=0
    )
    assert again == train.clips
