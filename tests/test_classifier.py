"""The classifiers on the captioner's CNN: shapes, padding, equivariance, transfer, tiny runs."""

import numpy as np
import pytest
import torch

from qkv.data.clips import ClipSet, make_clips
from qkv.data.fashion_mnist import FASHION_MNIST_DIR
from qkv.data.labelled_images import LabelledImages
from qkv.errors import InputError
from qkv.models import (
    CaptionerConfig,
    ClassifierConfig,
    ClipClassifier,
    ClipClassifierConfig,
    FrameTagger,
    FrameTaggerConfig,
    ImageClassifier,
    build_model,
)
from qkv.models.classifier import PAD_FRAME, frame_mask
from qkv.tasks.classifier import (
    ClassificationData,
    ClassifierSetup,
    evaluate_classifier,
    train_classifier,
)
from qkv.training import TrainConfig, train

INSTALLED = FASHION_MNIST_DIR.joinpath("t10k-labels-idx1-ubyte.gz").is_file()
CONFIG = dict(num_classes=10, feature_dim=16, grid=7, dropout=0.0)


def _padded(clips):
    longest = max(len(c) for c in clips)
    out = torch.full((len(clips), longest, 1, 28, 28), PAD_FRAME)
    for row, clip in enumerate(clips):
        out[row, : len(clip)] = clip
    return out


@pytest.mark.parametrize("pool", ["attention", "mean", "last"])
def test_clip_classifier_ignores_padded_frames(pool):
    torch.manual_seed(0)
    model = ClipClassifier(ClipClassifierConfig(pool=pool, **CONFIG)).eval()
    short, long = torch.rand(3, 1, 28, 28), torch.rand(6, 1, 28, 28)
    batch = _padded([short, long])
    assert frame_mask(batch).tolist() == [[True] * 3 + [False] * 3, [True] * 6]
    together = model.classify(batch, need_attention=True)
    alone = model.classify(short.unsqueeze(0)).logits
    assert together.logits.shape == (2, 1, 11)
    torch.testing.assert_close(together.logits[:1], alone, atol=1e-5, rtol=1e-5)
    if pool == "attention":
        weights = together.attention["frames"][0]  # (B, 1, T)
        assert torch.equal(weights[0, 0, 3:], torch.zeros(3))
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1))


def test_frame_tagger_without_positions_permutes_with_its_frames():
    torch.manual_seed(1)
    model = FrameTagger(FrameTaggerConfig(positions=False, **CONFIG)).eval()
    clip = torch.rand(1, 7, 1, 28, 28)
    permutation = torch.randperm(7)
    logits = model.classify(clip).logits
    assert logits.shape == (1, 7, 11)
    permuted = model.classify(clip[:, permutation]).logits
    torch.testing.assert_close(permuted, logits[:, permutation], atol=1e-5, rtol=1e-5)


def test_image_classifier_shapes_and_feature_attention_weights():
    model = ImageClassifier(
        ClassifierConfig(feature_attention=True, region_pool="attention", **CONFIG)
    )
    out = model.classify(torch.rand(2, 1, 28, 28), need_attention=True)
    assert out.logits.shape == (2, 1, 11)
    assert out.attention["feature"][0].shape == (2, 49, 49)
    assert out.attention["regions"][0].shape == (2, 1, 49)
    with pytest.raises(InputError, match="images must be"):
        model.classify(torch.rand(2, 3, 28, 28))


def test_feature_attention_starts_as_the_plain_cnn():
    torch.manual_seed(2)
    plain = ImageClassifier(ClassifierConfig(**CONFIG)).eval()
    gated = ImageClassifier(ClassifierConfig(feature_attention=True, **CONFIG)).eval()
    missing, unexpected = gated.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("frames.feature_attention") for k in missing)
    images = torch.rand(3, 1, 28, 28)
    torch.testing.assert_close(gated(images).logits, plain(images).logits)


def test_the_encoder_loads_exactly_into_a_captioner():
    classifier = ImageClassifier(ClassifierConfig(num_classes=4, channels=3, image_size=64, grid=8))
    captioner = build_model(
        "captioner", CaptionerConfig(vocab_size=20, image_size=64, feature_dim=64, grid=8)
    )
    captioner.encoder.load_state_dict(classifier.frames.encoder.state_dict(), strict=True)
    for name, tensor in classifier.frames.encoder.state_dict().items():
        assert torch.equal(captioner.encoder.state_dict()[name], tensor)


def test_config_and_setup_refuse_bad_values_with_one_clear_error():
    with pytest.raises(InputError, match="pool"):
        ClipClassifierConfig(num_classes=3, pool="max")
    with pytest.raises(InputError, match="channels"):
        ClassifierConfig(num_classes=3, channels=2)
    with pytest.raises(InputError, match="does not fit"):
        ClassifierSetup(data="clips", task="image")
    with pytest.raises(InputError, match="pool='last'"):
        ClassifierSetup(data="fashion-mnist", pool="last")


def _synthetic_clips(task, count, seed):
    """Frames whose class is drawn as a bright bar at row 2c + 4: easy to see, so a few
    seconds of training must beat chance through the whole pipeline."""
    labels = np.arange(200) % 10
    images = np.zeros((200, 28, 28), dtype=np.uint8)
    for index, label in enumerate(labels):
        images[index, 2 * label + 4 : 2 * label + 6, 6:22] = 200
    clips = make_clips(
        labels, range(200), task=task, count=count, seed=seed, stream=0, min_frames=3, max_frames=6
    )
    return ClassificationData(ClipSet(clips, images), task)


@pytest.mark.parametrize(
    "task, model_type, steps, frames",
    [("clip", "clip-classifier", 100, 48), ("per-frame", "frame-tagger", 50, 96)],
)
def test_a_tiny_run_of_each_clip_task_beats_chance_in_seconds(
    task, model_type, steps, frames, tmp_path
):
    torch.manual_seed(0)
    data, held_out = _synthetic_clips(task, 400, 0), _synthetic_clips(task, 100, 1)
    config = dict(num_classes=10, feature_dim=8, grid=7)
    config |= {"tagger_layers": 1} if model_type == "frame-tagger" else {}
    model = build_model(model_type, config)
    budget = TrainConfig(
        lr=3e-3,
        warmup_steps=10,
        label_smoothing=0.0,
        max_tokens=frames,
        max_steps=steps,
        validate_every=0,
        log_every=20,
        device="cpu",
    )
    train(model, data, None, budget, tmp_path)
    scores = evaluate_classifier(model, held_out)
    assert scores.accuracy > 0.2, scores  # chance is 0.1
    if task == "clip":
        assert scores.marked_weight > 1.5 * scores.uniform_weight
    else:
        assert scores.occluded_accuracy is not None


@pytest.mark.skipif(not INSTALLED, reason="Debian dataset-fashion-mnist is not installed")
def test_a_tiny_fashion_mnist_run_beats_chance_in_seconds(tmp_path):
    setup = ClassifierSetup(data="fashion-mnist", train_size=2000, valid_size=200, feature_dim=32)
    budget = TrainConfig(
        lr=2e-3,
        warmup_steps=10,
        label_smoothing=0.0,
        max_tokens=64,
        max_steps=40,
        validate_every=0,
        log_every=20,
        device="cpu",
    )
    result = train_classifier(setup, budget, tmp_path)
    assert result.valid["accuracy"] > 0.3  # chance is 0.1


def test_attention_figures_are_written(tmp_path):
    from qkv.tasks.classifier_plots import plot_classifier_attention

    torch.manual_seed(0)
    data = _synthetic_clips("clip", 6, 0)
    model = ClipClassifier(ClipClassifierConfig(feature_attention=True, **CONFIG))
    [frames] = plot_classifier_attention(model, data, tmp_path / "frames.png", count=3)
    assert frames.stat().st_size > 1000
    pictures = LabelledImages(
        torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8), [0, 1, 2], tuple("abc")
    )
    model = ImageClassifier(ClassifierConfig(feature_attention=True, **CONFIG))
    maps = plot_classifier_attention(
        model, ClassificationData(pictures, "image"), tmp_path / "maps.png", count=2
    )
    assert [p.name for p in maps] == ["maps-0.png", "maps-1.png"]
    tagger = FrameTagger(FrameTaggerConfig(tagger_layers=1, **CONFIG))
    [heads] = plot_classifier_attention(
        tagger, _synthetic_clips("per-frame", 2, 0), tmp_path / "h.png", count=1
    )
    assert heads.name == "h.png" and heads.stat().st_size > 1000
    alone = FrameTagger(FrameTaggerConfig(tagger_layers=0, **CONFIG))
    with pytest.raises(InputError, match="feature_attention"):
        plot_classifier_attention(alone, data, tmp_path / "x.png")


@pytest.mark.parametrize(
    "pool, saved_as",
    [("attention", {"pooling.query", "pooling.key.weight"}), ("mean", set()), ("last", None)],
)
def test_clip_pools_come_from_the_registry_and_keep_their_checkpoint_names(pool, saved_as):
    from qkv.models.classifier import ClipClassifier

    model = ClipClassifier(ClipClassifierConfig(pool=pool, **CONFIG)).eval()
    names = {name for name in model.state_dict() if not name.startswith(("frames.", "output."))}
    if saved_as is None:  # the GRU's weights, under the name checkpoints were written with
        saved_as = {f"recurrent.{p}_l0" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    assert names == saved_as
    clips = torch.rand(2, 3, 1, 28, 28)
    clips[1, 2] = PAD_FRAME  # the second clip has two real frames
    out = model.classify(clips, need_attention=True)
    assert out.logits.shape == (2, 1, 11)
    assert ("frames" in (out.attention or {})) == (pool == "attention")
    if pool == "last":  # the GRU's state after the last *real* frame: padding never read
        vectors = model.frames(clips[1, :2])[0]
        states, _ = torch.nn.GRU.forward(model.recurrent, vectors[None])
        expected = model.output(states[0, -1])
        torch.testing.assert_close(out.logits[1, 0], expected)


def test_a_pool_that_reads_an_order_is_refused_for_regions():
    with pytest.raises(InputError, match="region_pool='last' must be one of"):
        ClassifierConfig(region_pool="last", **CONFIG)
    with pytest.raises(InputError, match="pool='max' must be one of"):
        ClipClassifierConfig(pool="max", **CONFIG)


#: What every classifier checkpoint's config held before each model had its own config:
#: the fields of all three, at these values.
SHARED_CONFIG_BEFORE = dict(
    region_pool="mean", pool="attention", tagger_layers=2, num_heads=4, positions=True
)


@pytest.mark.parametrize(
    "model_type, config",
    [
        ("image-classifier", ClassifierConfig(feature_attention=True, **CONFIG)),
        ("clip-classifier", ClipClassifierConfig(pool="last", **CONFIG)),
        ("frame-tagger", FrameTaggerConfig(tagger_layers=1, positions=False, **CONFIG)),
    ],
)
def test_a_checkpoint_written_with_the_shared_config_loads_and_resumes_as_it_was(
    model_type, config, tmp_path
):
    import dataclasses
    import json

    from qkv.training.checkpoint import CONFIG_FILE, load_checkpoint, save_checkpoint
    from qkv.training.state import check_resumable

    torch.manual_seed(0)
    model = build_model(model_type, config).eval()
    directory = save_checkpoint(tmp_path, model, step=1)
    saved = json.loads((directory / CONFIG_FILE).read_text())
    # the model's own values win over the shared defaults, as the old config held them
    old = {**SHARED_CONFIG_BEFORE, **dataclasses.asdict(config)}
    (directory / CONFIG_FILE).write_text(json.dumps({**saved, "model": old}))
    loaded = load_checkpoint(tmp_path).model.eval()
    assert loaded.config == config and type(loaded.config) is type(config)
    clips = torch.rand(2, 3, 1, 28, 28)
    source = clips[:, 0] if model_type == "image-classifier" else clips
    with torch.no_grad():
        torch.testing.assert_close(loaded(source).logits, model(source).logits, rtol=0, atol=0)
    trainer = dict(model_type=model_type, model_config=old, data_fingerprint="f", world_size=1)
    trainer["train_config"] = TrainConfig(device="cpu").to_dict()
    same = dict(model_type=model_type, fingerprint="f", world_size=1, directory="old")
    check_resumable(
        trainer,
        model_config=dataclasses.asdict(config),
        train_config=TrainConfig(device="cpu"),
        **same,
    )
