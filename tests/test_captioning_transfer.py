"""Captioning on a transferred CNN: the classifier's encoder loads exactly, its encoder
fields replace the captioner's, a frozen encoder's features are cached exactly and once, the
frozen run leaves the encoder as it was and writes a normal captioner checkpoint, and
what does not fit is refused with one clear error."""

import json

import pytest
import torch

from qkv.cli.main import main
from qkv.data.captions import CaptionDataset, WordVocab
from qkv.data.scenes import scene_dataset
from qkv.errors import CheckpointError, InputError
from qkv.tasks import CaptioningSetup, ImageCaptioner
from qkv.tasks.captioning import CaptionTrainingData, build_captioner, remember_images
from qkv.tasks.captioning_transfer import (
    CachedRegionData,
    classifier_encoder,
    fit_setup_to_classifier,
    load_transferred_encoder,
)
from qkv.tasks.classifier import ClassifierSetup, train_classifier
from qkv.training import TrainConfig, load_checkpoint

DECODER = ["--embedding-dim", "16", "--hidden-dim", "32", "--attention-dim", "16"]
BUDGET = ["--max-steps", "3", "--validate-every", "3", "--max-tokens", "64", "--device", "cpu"]
DATA = ["--data", "shapes", "--train-size", "8", "--valid-size", "4", "--min-count", "1"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    """A tiny classifier on the one-object scenes (32 px, 4 x 4 regions of width 16)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("classifier")
    setup = ClassifierSetup(
        data="shapes", image_size=32, feature_dim=16, grid=4, train_size=16, valid_size=8
    )
    budget = TrainConfig(
        max_steps=2, epochs=None, warmup_steps=0, lr=1e-2, max_tokens=8, device="cpu"
    )
    train_classifier(setup, budget, out)
    return out


def encoder_tensors(module):
    return {name: tensor.clone() for name, tensor in module.state_dict().items()}


def assert_same_tensors(left, right):
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), name


def test_the_encoder_fields_come_from_the_classifier_and_every_weight_loads(classifier_dir):
    setup = fit_setup_to_classifier(CaptioningSetup(encoder_from=str(classifier_dir)))
    assert (setup.image_size, setup.feature_dim, setup.grid) == (32, 16, 4)
    model = build_captioner(setup, 20)
    load_transferred_encoder(model, classifier_dir)
    encoder, _ = classifier_encoder(classifier_dir)
    assert_same_tensors(encoder_tensors(model.encoder), encoder_tensors(encoder))
    assert any("running_mean" in name for name in encoder.state_dict())  # statistics too


def test_cached_features_are_the_frozen_encoders_and_are_computed_once():
    torch.manual_seed(0)
    model = build_captioner(CaptioningSetup(image_size=32, grid=4, feature_dim=16), 30)
    examples = remember_images(scene_dataset("train", image_size=32, size=6))
    vocab = WordVocab.build((c for e in examples for c in e.captions), min_count=1)
    data = CaptionTrainingData(CaptionDataset(examples, vocab), num_regions=16)
    calls = []
    model.encoder.register_forward_hook(lambda module, inputs, out: calls.append(len(out)))
    model.train()  # the cache must still use eval mode (batch norm's running statistics)
    cached = CachedRegionData(data, model.encoder, num_regions=16, feature_dim=16)
    indices = list(range(len(data)))[:10]
    batch = cached.collate(indices)
    images = batch.index.tolist()
    images_seen = sorted(set(images))
    assert calls == [len(images_seen)]  # one encoder call, one row per image
    plain = data.collate(indices)
    model.encoder.eval()
    with torch.no_grad():
        expected = model.encoder(plain.source[[images.index(i) for i in images_seen]])
    model.encoder.train()
    calls.clear()
    assert batch.source.shape == (10, 16, 16) and batch.source.dtype == torch.float32
    assert torch.equal(batch.target, plain.target) and torch.equal(batch.index, plain.index)
    for row, image in enumerate(images):
        assert torch.equal(batch.source[row], expected[images_seen.index(image)])
    assert model.encoder.training  # left as it was
    again = cached.collate(indices)  # every image cached: no encoder call
    assert calls == [] and torch.equal(again.source, batch.source)
    assert sorted(cached.features) == images_seen  # one (P, D) float32 entry per image
    assert all(f.shape == (16, 16) and f.dtype == torch.float32 for f in cached.features.values())
    logits = model(batch.source, batch.target_input).logits  # the captioner reads features
    assert logits.shape[:2] == batch.target_input.shape


def test_the_cache_refuses_more_memory_than_its_limit():
    examples = scene_dataset("train", image_size=32, size=4)
    vocab = WordVocab.build((c for e in examples for c in e.captions), min_count=1)
    data = CaptionTrainingData(CaptionDataset(examples, vocab), num_regions=16)
    encoder = build_captioner(CaptioningSetup(image_size=32, grid=4, feature_dim=16), 9).encoder
    with pytest.raises(InputError, match="lower train_size"):
        CachedRegionData(data, encoder, num_regions=16, feature_dim=16, max_bytes=4 * 16 * 16)


def test_the_captioner_checks_region_features():
    model = build_captioner(CaptioningSetup(image_size=32, grid=4, feature_dim=16), 9)
    regions = torch.rand(2, 16, 16)
    assert model.encode(regions) is regions
    with pytest.raises(ValueError, match=r"\(B, 16, 16\)"):
        model.encode(torch.rand(2, 9, 16))


def test_frozen_training_keeps_the_encoder_and_writes_a_normal_checkpoint(
    classifier_dir, tmp_path, capsys
):
    out = tmp_path / "frozen"
    argv = ["train", "captioning", *DATA, *DECODER, *BUDGET, "--out", str(out)]
    assert main([*argv, "--encoder-from", str(classifier_dir), "--freeze-encoder"]) == 0
    assert "feature_dim=16" in capsys.readouterr().out
    checkpoint = load_checkpoint(out)
    encoder, _ = classifier_encoder(classifier_dir)
    assert_same_tensors(encoder_tensors(checkpoint.model.encoder), encoder_tensors(encoder))
    assert checkpoint.metadata["setup"]["freeze_encoder"] is True
    captioner = ImageCaptioner.from_checkpoint(out)  # the whole captioner, encoder included
    assert captioner.image_size == 32
    evaluate = ["evaluate", "--checkpoint", str(out), "--data", "shapes", "--limit", "3"]
    assert main([*evaluate, "--json"]) == 0
    assert "bleu4" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_a_transferred_encoder_that_is_not_frozen_trains(classifier_dir, tmp_path):
    out = tmp_path / "transferred"
    argv = ["train", "captioning", *DATA, *DECODER, *BUDGET, "--lr", "1e-2", "--out", str(out)]
    assert main([*argv, "--encoder-from", str(classifier_dir)]) == 0
    trained = encoder_tensors(load_checkpoint(out).model.encoder)
    encoder, _ = classifier_encoder(classifier_dir)
    start = encoder_tensors(encoder)
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[name], start[name]) for name in start)


def test_what_does_not_fit_is_refused(classifier_dir, tmp_path, capsys):
    with pytest.raises(InputError, match="feature_dim=24"):
        fit_setup_to_classifier(CaptioningSetup(encoder_from=str(classifier_dir), feature_dim=24))
    with pytest.raises(InputError, match="give encoder_from"):
        CaptioningSetup(freeze_encoder=True)
    with pytest.raises(CheckpointError, match="does not exist"):
        classifier_encoder(tmp_path / "nothing")
    captioner_run = tmp_path / "captioner"
    argv = ["train", "captioning", *DATA, *DECODER, *BUDGET]
    assert main([*argv, "--image-size", "32", "--grid", "4", "--out", str(captioner_run)]) == 0
    with pytest.raises(InputError, match="not a classifier"):
        classifier_encoder(captioner_run)
    capsys.readouterr()
    bad = [*argv, "--out", str(tmp_path / "x"), "--encoder-from", str(captioner_run)]
    assert main(bad) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "not a classifier" in error[0]
