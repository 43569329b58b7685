"""Captioning data: generated scenes, the Karpathy-JSON reader, the word vocabulary, the
caption dataset and its collate."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from qkv.data.captions import (
    CaptionDataset,
    WordVocab,
    collate_captions,
)
from qkv.data.karpathy import load_image, read_karpathy
from qkv.data.scenes import COLOURS, scene_dataset

# ---------------------------------------------------------------- generated scenes


def test_scenes_are_deterministic_per_seed():
    first, again = scene_dataset("train", size=12, seed=3), scene_dataset("train", size=12, seed=3)
    assert [e.raw for e in first] == [e.raw for e in again]
    assert all(torch.equal(a.image, b.image) for a, b in zip(first, again, strict=True))
    other = scene_dataset("train", size=12, seed=4)
    assert [e.objects for e in first] != [e.objects for e in other]
    # a longer split starts with the same scenes
    assert [e.objects for e in scene_dataset("train", size=20, seed=3)[:12]] == [
        e.objects for e in first
    ]


def test_scene_splits_are_disjoint():
    layouts = {
        split: {e.objects for e in scene_dataset(split, size=200)}
        for split in ("train", "valid", "test")
    }
    assert all(len(layout) == 200 for layout in layouts.values())
    assert not layouts["train"] & layouts["valid"]
    assert not layouts["train"] & layouts["test"]
    assert not layouts["valid"] & layouts["test"]
    assert len(scene_dataset("test")) == 300 and len(scene_dataset("valid")) == 300


@pytest.mark.parametrize("image_size", [64, 96])
def test_scene_boxes_hold_their_objects(image_size):
    for example in scene_dataset("valid", size=60, image_size=image_size):
        image = example.image
        assert image.shape == (3, image_size, image_size) and image.dtype == torch.float32
        assert 0.0 <= image.min() and image.max() <= 1.0
        covered = torch.zeros(image_size, image_size, dtype=torch.bool)
        for obj in example.objects:
            x0, y0, x1, y1 = obj.box
            assert 0 <= x0 < x1 <= image_size and 0 <= y0 < y1 <= image_size
            colour = torch.tensor(COLOURS[obj.colour]) / 255
            centre = image[:, (y0 + y1) // 2, (x0 + x1) // 2]
            assert torch.allclose(centre, colour), (example.image_id, obj)
            if obj.shape == "square":  # the whole box is the object
                assert torch.allclose(
                    image[:, y0:y1, x0:x1], colour.view(3, 1, 1).expand(3, y1 - y0, x1 - x0)
                )
            covered[y0:y1, x0:x1] = True
        background = image[:, ~covered]  # grey, possibly noised: R = G = B
        assert torch.equal(background[0], background[1]) and torch.equal(
            background[1], background[2]
        )


def test_scene_captions_name_every_object_and_their_relation():
    for example in scene_dataset("train", size=150):
        objects = example.objects
        assert 1 <= len(objects) <= 3 and len(example.captions) == len(example.grounding) == 2
        for caption, raw, grounding in zip(
            example.captions, example.raw, example.grounding, strict=True
        ):
            assert raw == " ".join(caption) and len(caption) <= 20
            assert set(grounding.values()) == set(range(len(objects)))
            for position, index in grounding.items():
                assert caption[position] in (objects[index].colour, objects[index].shape)
                assert caption[position - 1] in (objects[index].size, objects[index].colour)
        if len(objects) == 2:  # "a <A> <rel> a <B>": check <rel> against the boxes
            caption, grounding = example.captions[0], example.grounding[0]
            first, second = grounding[3], grounding[len(caption) - 1]
            (ax, ay), (bx, by) = objects[first].centre, objects[second].centre
            relation = caption[4]
            expected = {"left": ax < bx, "right": ax > bx, "above": ay < by, "below": ay > by}
            assert expected[relation]
            assert (
                abs(ax - bx) >= abs(ay - by)
                if relation in ("left", "right")
                else abs(ax - bx) < abs(ay - by)
            )


# ---------------------------------------------------------------- Karpathy JSON reader


@pytest.fixture
def karpathy(tmp_path):
    images = tmp_path / "images"
    (images / "sub").mkdir(parents=True)
    Image.new("RGB", (40, 30), (255, 0, 0)).save(images / "red.jpg", quality=100)
    Image.fromarray(np.full((50, 50), 128, dtype=np.uint8), mode="L").save(images / "gray.png")
    rgba = np.zeros((20, 20, 4), dtype=np.uint8)
    rgba[:, :10] = (0, 0, 255, 255)  # opaque blue left half, transparent right half
    Image.fromarray(rgba, mode="RGBA").save(images / "sub" / "rgba.png")
    stripes = np.zeros((91, 31, 3), dtype=np.uint8)  # odd size, portrait: blue / red / green
    stripes[:30] = (0, 0, 255)
    stripes[30:61] = (255, 0, 0)
    stripes[61:] = (0, 255, 0)
    Image.fromarray(stripes).save(images / "tall.png")
    Image.new("P", (16, 16), 3).save(images / "palette.gif")
    (images / "broken.jpg").write_text("not an image")

    def sentence(text):
        return {"tokens": text.lower().split(), "raw": text}

    records = [
        {
            "filename": "red.jpg",
            "split": "train",
            "sentences": [sentence("A red card"), sentence("Red")],
        },
        {
            "filename": "gray.png",
            "split": "restval",
            "sentences": [{"raw": "A GREY square, flat."}],
        },
        {
            "filename": "rgba.png",
            "filepath": "sub",
            "split": "train",
            "sentences": [sentence("Blue")],
        },
        {"filename": "tall.png", "split": "val", "sentences": [sentence("stripes")]},
        {"filename": "palette.gif", "split": "test", "sentences": [sentence("a palette")]},
        {"filename": "broken.jpg", "split": "test", "sentences": [sentence("broken")]},
    ]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": records}))
    return path, images, records


def test_karpathy_reader_gives_fixed_size_rgb(karpathy):
    path, images, _ = karpathy
    train = read_karpathy(path, images, "train", image_size=32)
    assert [e.image_id for e in train] == [
        "red.jpg",
        "gray.png",
        "sub/rgba.png",
    ]  # restval is train
    assert train[0].captions == [["a", "red", "card"], ["red"]] and train[0].raw[0] == "A red card"
    assert train[1].captions == [["a", "grey", "square", "flat"]]  # tokenised from raw
    red, gray, rgba = (e.image for e in train)
    for image in (red, gray, rgba):
        assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert torch.allclose(
        red, torch.tensor([1.0, 0.0, 0.0]).view(3, 1, 1).expand(3, 32, 32), atol=0.02
    )
    assert torch.equal(gray[0], gray[1]) and torch.allclose(gray, torch.full_like(gray, 128 / 255))
    assert torch.allclose(
        rgba[:, :, :14], torch.tensor([0.0, 0, 1]).view(3, 1, 1).expand(3, 32, 14), atol=0.02
    )
    assert torch.allclose(rgba[:, :, 18:], torch.ones(3, 32, 14), atol=0.02)  # transparent -> white
    (tall,) = read_karpathy(path, images, "valid", image_size=24)
    # shorter side -> 24, centre square cropped: only the red middle stripe remains
    assert torch.allclose(
        tall.image[:, 2:-2], torch.tensor([1.0, 0, 0]).view(3, 1, 1).expand(3, 20, 24), atol=0.03
    )
    assert load_image(images / "palette.gif", 8).shape == (3, 8, 8)


def write(path, records):
    path.write_text(json.dumps({"images": records}))
    return path


def test_karpathy_errors(karpathy, tmp_path):
    path, images, records = karpathy
    with pytest.raises(FileNotFoundError, match="absent.json"):
        read_karpathy(tmp_path / "absent.json", images, "train")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        read_karpathy(tmp_path / "bad.json", images, "train")
    (tmp_path / "x.json").write_text(json.dumps({"pictures": []}))
    with pytest.raises(ValueError, match="the top level has no field 'images'"):
        read_karpathy(tmp_path / "x.json", images, "train")
    no_sentences = [records[0], {"filename": "gray.png", "split": "train"}]
    with pytest.raises(ValueError, match=r"images\[1\] has no field 'sentences'"):
        read_karpathy(write(tmp_path / "y.json", no_sentences), images, "train")
    no_filename = [{"split": "train", "sentences": []}]
    with pytest.raises(ValueError, match=r"images\[0\] has no field 'filename'"):
        read_karpathy(write(tmp_path / "z.json", no_filename), images, "train")
    missing_image = [{**records[0], "filename": "nowhere.jpg"}]
    with pytest.raises(FileNotFoundError, match="nowhere.jpg"):
        read_karpathy(write(tmp_path / "w.json", missing_image), images, "train")
    with pytest.raises(ValueError, match=r"no images in split 'val'.*\['train'\]"):
        read_karpathy(write(tmp_path / "v.json", records[:1]), images, "val")
    broken = read_karpathy(path, images, "test")[1]
    with pytest.raises(ValueError, match="cannot read .*broken.jpg as an image"):
        _ = broken.image
    with pytest.raises(ValueError, match="split='dev'"):
        read_karpathy(path, images, "dev")


# ---------------------------------------------------------------- vocabulary, dataset, collate


def test_word_vocab(tmp_path):
    captions = [["a", "red", "circle"], ["a", "blue", "circle"], ["a", "red", "square"]]
    vocab = WordVocab.build(captions, min_count=2)
    assert vocab.tokens == ["<pad>", "<s>", "</s>", "<unk>", "a", "circle", "red"]
    assert vocab.encode(["a", "blue", "circle"]) == [4, UNK_ID, 5]
    assert vocab.decode([BOS_ID, 4, UNK_ID, 6, EOS_ID, 5, PAD_ID]) == ["a", "<unk>", "red"]
    assert vocab.decode([4, 5, PAD_ID, PAD_ID]) == ["a", "circle"]
    assert len(WordVocab.build(captions, max_size=6)) == 6
    full = WordVocab.build(captions)
    assert full.decode(full.encode(captions[2])) == captions[2]
    full.save(tmp_path / "vocab.json")
    assert WordVocab.load(tmp_path / "vocab.json").tokens == full.tokens
    (tmp_path / "other.json").write_text('{"tokens": ["a"]}')
    with pytest.raises(ValueError, match="not a WordVocab file"):
        WordVocab.load(tmp_path / "other.json")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        full.decode([99])
    with pytest.raises(ValueError, match="min_count=0"):
        WordVocab.build(captions, min_count=0)


def test_caption_dataset_and_collate():
    examples = scene_dataset("test", size=5)
    vocab = WordVocab.build(c for e in examples for c in e.captions)
    train = CaptionDataset(examples, vocab)
    assert len(train) == sum(len(e.captions) for e in examples)
    image, caption, index = train[1]
    assert image.shape == (3, 64, 64) and index == 0
    assert caption == [BOS_ID, *vocab.encode(examples[0].captions[1]), EOS_ID]
    batch = collate_captions([train[i] for i in range(4)])
    longest = max(len(train[i].caption) for i in range(4))
    assert batch.source.shape == (4, 3, 64, 64) and batch.target.shape == (4, longest)
    assert batch.index.tolist() == [0, 0, 1, 1]
    assert (batch.target[:, 0] == BOS_ID).all() and batch.target.dtype == torch.long
    for row in range(4):
        length = len(train[row].caption)
        assert (batch.target[row, length:] == PAD_ID).all()
    evaluation = CaptionDataset(examples, vocab, per_caption=False, max_caption_len=3)
    assert len(evaluation) == 5 and evaluation.references(2) == examples[2].captions
    assert len(evaluation[2].caption) == 3 + 2  # cut to 3 words, plus <s> and </s>
    small = scene_dataset("test", size=1, image_size=32)
    with pytest.raises(ValueError, match="share a shape"):
        collate_captions([train[0], CaptionDataset(small, vocab)[0]])
