"""The explorer on the classifiers (issue 15): the page's numbers are the weights the model
returns with ``need_attention``, models without attention weights are refused, and
``qkv explore`` reads classifier checkpoints.  Tiny random-weight models built here."""

import dataclasses
import json
import re

import pytest
import torch
from PIL import Image

from qkv.cli.main import main
from qkv.errors import InputError
from qkv.explore import WEIGHT_SCALE, attention_rollout, explore
from qkv.models.classifier import (
    ClassifierConfig,
    ClipClassifier,
    ClipClassifierConfig,
    FrameTagger,
    FrameTaggerConfig,
    ImageClassifier,
)
from qkv.tasks.classifier import ClassifierSetup, build_classifier, classification_data
from qkv.training.checkpoint import save_checkpoint

TOLERANCE = 0.5 / WEIGHT_SCALE + 1e-6
CLASSES = ["coat", "bag", "boot"]
CONFIG = dict(num_classes=3, feature_dim=8, grid=7, dropout=0.0)


def tiny_image_classifier() -> ImageClassifier:
    torch.manual_seed(0)
    config = ClassifierConfig(feature_attention=True, region_pool="attention", **CONFIG)
    return ImageClassifier(config).eval()


def tiny_clip_classifier(pool: str = "attention") -> ClipClassifier:
    torch.manual_seed(1)
    return ClipClassifier(ClipClassifierConfig(pool=pool, **CONFIG)).eval()


def tiny_tagger(layers: int = 2) -> FrameTagger:
    torch.manual_seed(2)
    return FrameTagger(FrameTaggerConfig(tagger_layers=layers, num_heads=2, **CONFIG)).eval()


def stored(matrix) -> torch.Tensor:
    return torch.tensor(matrix, dtype=torch.float64) / WEIGHT_SCALE


def close(page_matrix, weights: torch.Tensor) -> bool:
    return torch.allclose(stored(page_matrix), weights.double(), atol=TOLERANCE, rtol=0)


def test_image_page_holds_the_feature_map_and_pooling_weights_of_the_model():
    model = tiny_image_classifier()
    picture = torch.rand(1, 28, 28, generator=torch.Generator().manual_seed(3))
    data = explore(model, [picture], tokenizer=CLASSES, labels=[2])
    [page] = data["inputs"]
    expected = model.classify(picture[None], need_attention=True)
    feature, regions = page["views"]
    assert (feature["id"], regions["id"]) == ("feature", "regions")
    assert close(feature["layers"][0]["heads"][0], expected.attention["feature"][0][0])  # (P, P)
    assert close(regions["layers"][0]["heads"][0], expected.attention["regions"][0][0])  # (1, P)
    assert len(feature["query_tokens"]) == len(feature["key_tokens"]) == 49
    assert page["image"]["grid"] == [7, 7] and page["image"]["png"].startswith("data:image/png")
    guess = int(expected.logits[0, 0, 1:].argmax())
    assert page["prediction"] == [guess] and page["output"] == CLASSES[guess]
    assert page["label"] == 2 and page["truth_tokens"] == ["boot"]
    assert data["model"]["kind"] == "image-classifier" and data["model"]["feature_attention"]


def test_clip_page_holds_the_pooling_weight_of_each_frame():
    model = tiny_clip_classifier()
    clip = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(4))
    [page] = explore(model, [clip], tokenizer=CLASSES, labels=[0])["inputs"]
    expected = model.classify(clip[None], need_attention=True)
    [view] = page["views"]
    weights = expected.attention["frames"][0][0]  # (1, T)
    assert view["id"] == "frames" and view["query_tokens"] == ["clip"]
    assert close(view["layers"][0]["heads"][0], weights)
    assert abs(float(stored(view["layers"][0]["heads"][0]).sum()) - 1) < 6 * TOLERANCE
    assert len(page["frames"]) == 6 and page["source_tokens"] == [str(t) for t in range(6)]
    assert page["prediction"] == [int(expected.logits[0, 0, 1:].argmax())]


def test_tagger_page_holds_every_block_and_head_and_the_rollout():
    model = tiny_tagger()
    clip = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(5))
    [page] = explore(model, [clip], tokenizer=CLASSES, labels=[[0, 1, 2, 0, 1]])["inputs"]
    expected = model.classify(clip[None], need_attention=True)
    [view] = page["views"]
    assert view["kind"] == "self" and len(view["layers"]) == 2
    for layer, weights in zip(view["layers"], expected.attention["self"], strict=True):
        assert len(layer["heads"]) == 2
        for head, matrix in enumerate(layer["heads"]):
            assert close(matrix, weights[0, head])  # (T, T)
    rollout = attention_rollout([w[0] for w in expected.attention["self"]])
    assert close(view["layers"][1]["rollout"], rollout[1])
    guesses = expected.logits[0, :, 1:].argmax(dim=-1).tolist()
    assert view["query_tokens"] == [f"{t} {CLASSES[c]}" for t, c in enumerate(guesses)]
    assert page["truth_tokens"] == ["coat", "bag", "boot", "coat", "bag"]


@pytest.mark.parametrize(
    "model, fix",
    [
        (tiny_clip_classifier("mean"), "pool='attention'"),
        (tiny_clip_classifier("last"), "pool='attention'"),
        (ImageClassifier(ClassifierConfig(**CONFIG)), "feature_attention=True"),
        (tiny_tagger(layers=0), "tagger_layers=1"),
    ],
)
def test_classifiers_without_attention_weights_are_refused(model, fix):
    with pytest.raises(InputError, match=re.escape(fix)):
        explore(model, [torch.rand(4, 1, 28, 28)], tokenizer=CLASSES)


def test_bad_classifier_inputs_get_one_clear_error():
    clip_model, picture = tiny_clip_classifier(), torch.rand(1, 28, 28)
    with pytest.raises(InputError, match=r"\(T, C, S, S\) clips"):
        explore(clip_model, [picture], tokenizer=CLASSES)
    with pytest.raises(InputError, match="floats in"):
        explore(clip_model, [torch.full((3, 1, 28, 28), -1.0)], tokenizer=CLASSES)
    with pytest.raises(InputError, match="2 class names"):
        explore(clip_model, [torch.rand(3, 1, 28, 28)], tokenizer=CLASSES[:2])
    with pytest.raises(InputError, match="3 frame labels for a clip of 4"):
        explore(tiny_tagger(), [torch.rand(4, 1, 28, 28)], tokenizer=CLASSES, labels=[[0, 1, 2]])
    with pytest.raises(InputError, match="C = 1"):
        explore(tiny_image_classifier(), [torch.rand(3, 28, 28)], tokenizer=CLASSES)


def _checkpoint(folder, **setup_fields):
    setup = ClassifierSetup(feature_dim=8, **setup_fields)
    torch.manual_seed(0)
    model = build_classifier(setup, 10, 1)
    metadata = {"setup": dataclasses.asdict(setup), "classes": [f"c{i}" for i in range(10)]}
    save_checkpoint(folder, model, step=0, metadata=metadata)
    return setup


def _page_data(path) -> dict:
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="qkv-data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1))


def test_explore_command_on_test_clips_shows_their_true_labels(tmp_path, capsys):
    setup = _checkpoint(tmp_path / "tagger", data="clips", task="per-frame")
    out = tmp_path / "tagger.html"
    args = ["explore", "--checkpoint", str(tmp_path / "tagger"), "--test", "2", "--out", str(out)]
    assert main(args) == 0
    data = _page_data(out)
    clips = classification_data(setup, "test", 2)
    assert data["model"]["kind"] == "frame-tagger"
    assert [page["label"] for page in data["inputs"]] == [clips.labels(0), clips.labels(1)]
    assert "(true: c" in capsys.readouterr().out
    _checkpoint(tmp_path / "mean", data="clips", task="clip", pool="mean")
    args = ["explore", "--checkpoint", str(tmp_path / "mean"), "--test", "1", "--out", str(out)]
    assert main(args) == 2
    assert "pools its frames by 'mean'" in capsys.readouterr().err


def test_explore_command_on_picture_files(tmp_path, capsys):
    _checkpoint(tmp_path / "run", data="fashion-mnist", feature_attention=True)
    Image.new("L", (40, 40), 200).save(tmp_path / "grey.png")
    out = tmp_path / "page.html"
    picture = str(tmp_path / "grey.png")
    assert main(["explore", "--checkpoint", str(tmp_path / "run"), picture, "--out", str(out)]) == 0
    [page] = _page_data(out)["inputs"]
    assert page["name"] == "grey.png" and page["label"] is None
    assert [view["id"] for view in page["views"]] == ["feature"]
    _checkpoint(tmp_path / "clips", data="clips", task="clip")
    assert (
        main(["explore", "--checkpoint", str(tmp_path / "clips"), "x.png", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert "with test=N" in err and "(set by --test)" in err


def test_qkv_attention_on_a_classifier_names_the_commands_that_draw_its_attention(tmp_path, capsys):
    _checkpoint(tmp_path / "clips", data="clips", task="clip")
    args = ["attention", "--checkpoint", str(tmp_path / "clips"), "x", "--out", "x.png"]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert "'clip-classifier'" in error and "qkv classify --attention-out" in error
