"""`qkv train classifier` end to end on a folder of class subfolders, and the folder reader."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from qkv.cli.main import main
from qkv.data.image_folders import read_image_folder, split_of
from qkv.errors import DataError, MissingFileError
from qkv.families import family_named
from qkv.models import LoadedModel
from qkv.tasks.classifier import ClassifierSetup


def _folder(root, per_class=40):
    """Two classes a colour apart: red squares and blue squares, at random places."""
    rng = np.random.default_rng(0)
    for name, colour in (("blue", (30, 60, 220)), ("red", (220, 40, 40))):
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            pixels = np.full((20, 24, 3), 128, dtype=np.uint8)
            y, x = rng.integers(0, 10, size=2)
            pixels[y : y + 8, x : x + 8] = colour
            Image.fromarray(pixels).save(root / name / f"{index:03d}.png")
    return root


def test_the_folder_reader_splits_by_path_and_names_classes(tmp_path):
    root = _folder(tmp_path / "pictures")
    splits = {s: read_image_folder(root, s, image_size=16) for s in ("train", "valid", "test")}
    assert splits["train"].classes == ("blue", "red")
    assert sum(len(s) for s in splits.values()) == 80
    assert splits["train"].images.shape[1:] == (3, 16, 16)
    assert split_of("red/001.png") == split_of("red/001.png")
    with pytest.raises(MissingFileError):
        read_image_folder(tmp_path / "nowhere", "train", image_size=16)
    (tmp_path / "one" / "only").mkdir(parents=True)
    with pytest.raises(DataError, match="at least two"):
        read_image_folder(tmp_path / "one", "train", image_size=16)


def test_train_classifier_command_on_a_folder_beats_chance(tmp_path, capsys):
    root = _folder(tmp_path / "pictures")
    args = ["train", "classifier", "--data", str(root), "--image-size", "16"]
    args += [
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "40",
        "--max-tokens",
        "8",
        "--epochs",
        "0",
    ]
    args += ["--warmup-steps", "5", "--valid-size", "8"]
    args += ["--feature-dim", "16", "--threads", "1", "--log-every", "10", "--json"]
    assert main(args) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scores["accuracy"] > 0.5 and scores["count"] >= 1  # chance is 0.5 at best
    assert (tmp_path / "run" / "log.jsonl").is_file()


@pytest.mark.parametrize("command", [["train", "classifier"], ["classify"]])
def test_the_commands_have_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    assert "example:" in capsys.readouterr().out


def test_classify_scores_a_checkpoint_and_refuses_a_bad_limit(tmp_path, capsys):
    root = _folder(tmp_path / "pictures", per_class=12)
    args = ["train", "classifier", "--data", str(root), "--image-size", "16", "--epochs", "0"]
    args += ["--out", str(tmp_path / "run"), "--max-steps", "3", "--feature-dim", "8"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(["classify", "--checkpoint", str(tmp_path / "run"), "--split", "train"]) == 0
    assert "accuracy:" in capsys.readouterr().out
    assert main(["classify", "--checkpoint", str(tmp_path / "run"), "--limit", "0"]) == 2
    assert "--limit 0" in capsys.readouterr().err
    # the family's loader: the model in eval mode with its setup, and no tokenizer
    loaded = family_named("classifier").loader(tmp_path / "run")  # load_classifier
    assert isinstance(loaded, LoadedModel) and loaded.model_type == "image-classifier"
    assert loaded.tokenizer is None and not loaded.model.training
    assert isinstance(loaded.setup, ClassifierSetup) and loaded.setup.feature_dim == 8
    # `qkv generate` names the commands its family's record gives
    assert main(["generate", "--checkpoint", str(tmp_path / "run"), "--prompt", "a"]) == 2
    err = capsys.readouterr().err
    assert "does not generate text; use qkv classify --attention-out or qkv explore" in err


def test_a_bad_pool_is_one_clear_line(tmp_path, capsys):
    args = ["train", "classifier", "--data", "fashion-mnist", "--pool", "last"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 2
    assert "--pool last" in capsys.readouterr().err


def test_scene_classes_label_one_object_scenes_by_colour_and_shape():
    from qkv.data.labelled_images import SCENE_CLASSES, scene_classes
    from qkv.data.scenes import scene_dataset

    items = scene_classes("valid", image_size=32, size=8)
    assert items.images.shape == (8, 3, 32, 32) and len(SCENE_CLASSES) == 18
    singles = [e for e in scene_dataset("valid", image_size=32, size=72) if len(e.objects) == 1]
    assert len(singles) >= len(items) == 8  # the labels below are checked one by one
    for label, example in zip(items.labels.tolist(), singles[: len(items)], strict=True):
        obj = example.objects[0]
        assert SCENE_CLASSES[label] == f"{obj.colour} {obj.shape}"


@pytest.mark.parametrize("image_size, preset", [(16, "pictures"), (64, "large-pictures")])
def test_a_run_trains_with_its_datas_preset_unless_told_otherwise(
    image_size, preset, tmp_path, capsys
):
    from qkv.tasks.presets import PRESETS
    from qkv.training.checkpoint import load_trainer_state

    root = _folder(tmp_path / "pictures", per_class=6)
    args = ["train", "classifier", "--data", str(root), "--image-size", str(image_size)]
    args += ["--feature-dim", "8", "--max-steps", "1", "--valid-size", "2", "--threads", "1"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    saved = load_trainer_state(tmp_path / "run" / "checkpoints" / "step-000001")["train_config"]
    expected = PRESETS[("classifier", preset)].train
    assert {name: saved[name] for name in expected} == dict(expected)
    assert main([*args, "--out", str(tmp_path / "given"), "--max-tokens", "3", "--lr", "0.01"]) == 0
    given = load_trainer_state(tmp_path / "given" / "checkpoints" / "step-000001")["train_config"]
    assert (given["max_tokens"], given["lr"], given["epochs"]) == (3, 0.01, expected["epochs"])


def test_a_resumed_classifier_run_ends_where_an_uninterrupted_one_does(tmp_path, capsys):
    from qkv.tasks.classifier import load_classifier

    root = _folder(tmp_path / "pictures", per_class=12)
    args = ["train", "classifier", "--data", str(root), "--image-size", "16", "--epochs", "0"]
    args += ["--feature-dim", "8", "--max-tokens", "4", "--validate-every", "0"]
    assert main([*args, "--out", str(tmp_path / "whole"), "--max-steps", "5"]) == 0
    assert main([*args, "--out", str(tmp_path / "parts"), "--max-steps", "3"]) == 0
    assert main([*args, "--out", str(tmp_path / "parts"), "--max-steps", "5", "--resume"]) == 0
    step = "checkpoints/step-000005"
    whole = load_classifier(tmp_path / "whole" / step).model
    parts = load_classifier(tmp_path / "parts" / step).model
    for name, tensor in whole.state_dict().items():
        assert torch.equal(tensor, parts.state_dict()[name]), name


def test_scene_classes_are_the_one_object_scenes_of_scene_dataset_pixel_for_pixel():
    from qkv.data.labelled_images import scene_classes, stack_images
    from qkv.data.scenes import scene_dataset

    items = scene_classes("train", image_size=32, size=12)
    singles = [e for e in scene_dataset("train", image_size=32, size=88) if len(e.objects) == 1]
    assert torch.equal(items.images, stack_images(e.image for e in singles[:12]))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(split="dev", drawn=5), "split='dev'"),
        (dict(split="train", drawn=0), "drawn=0"),
        (dict(split="train", drawn=5, image_size=16), "image_size=16"),
        (dict(split="train", drawn=5, seed=-1), "seed=-1"),
    ],
)
def test_single_object_scenes_rejects_bad_arguments_in_one_line(kwargs, words):
    from qkv.data.scenes import single_object_scenes

    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        single_object_scenes(**kwargs)
