"""Validation on a fixed sample of the validation batches, and the full text at the end."""

from __future__ import annotations

import json

import pytest
import torch

from qkv.training import TrainConfig, seed_everything, train
from qkv.training.validation import SampledBatches
from tests.train_worker import FixedBatches, ToyConfig, ToySampler, ToySeq2Seq, copy_data, small_run


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_sample_spreads_evenly_over_the_batches_and_never_changes():
    batches = FixedBatches([[i] for i in range(10)])
    sample = SampledBatches(batches, 4)
    assert sample.batches(0) == [[0], [3], [6], [9]] == sample.batches(7)
    assert SampledBatches(batches, 1).batches(0) == [[0]]
    assert SampledBatches(batches, 10).batches(0) == SampledBatches(batches, 50).batches(0)
    assert len(SampledBatches(batches, 50).batches(0)) == 10
    with pytest.raises(ValueError, match="at least 1"):
        SampledBatches(batches, 0)


def test_eval_batches_must_be_a_count():
    with pytest.raises(ValueError, match="eval_batches"):
        TrainConfig(eval_batches=-1)


def validations(out_dir) -> list[dict]:
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "valid"]


def test_a_sampled_run_scores_its_sample_then_the_whole_text_at_the_end(tmp_path):
    # the toy validation data has two batches; one of them is the sample
    _, whole = small_run(tmp_path / "whole", max_steps=4, validate_every=2)
    _, sampled = small_run(tmp_path / "sampled", max_steps=4, validate_every=2, eval_batches=1)
    every, some = validations(tmp_path / "whole"), validations(tmp_path / "sampled")
    assert [r["step"] for r in every] == [r["step"] for r in some] == [2, 4]
    # the same training (validation draws no random numbers): the full text agrees
    assert sampled.valid["valid_loss_full"] == pytest.approx(whole.valid["valid_loss"], abs=1e-12)
    assert some[-1]["valid_loss_full"] == pytest.approx(every[-1]["valid_loss"], abs=1e-12)
    assert "valid_loss_full" not in some[0] and "valid_loss_full" not in whole.valid
    # the sample is half the text: not its mean
    assert some[0]["valid_loss"] != pytest.approx(every[0]["valid_loss"])


def test_a_run_stopped_early_scores_the_whole_text_too(tmp_path):
    scores = iter([10.0, 12.0, 11.0, 9.0, 50.0])  # patience 2 runs out at step 4
    seed_everything(1)
    data = copy_data(24, seed=5)
    config = TrainConfig(
        lr=1e-2,
        warmup_steps=1,
        epochs=None,
        max_steps=20,
        validate_every=1,
        patience=2,
        eval_batches=1,
        device="cpu",
    )
    result = train(
        ToySeq2Seq(ToyConfig()),
        data,
        data,
        config,
        tmp_path,
        evaluate=lambda m: {"bleu": next(scores)},
        train_batches=ToySampler(24, 4),
        valid_batches=FixedBatches([[0, 1], [2, 3], [4, 5]]),
    )
    assert result.stop_reason == "early_stopping" and result.steps == 4
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    full = [r for r in map(json.loads, lines) if r["event"] == "valid_full"]
    assert [r["step"] for r in full] == [4]
    assert result.valid["valid_loss_full"] == full[0]["valid_loss_full"]
    assert result.valid["valid_loss"] != pytest.approx(result.valid["valid_loss_full"])


def test_a_sample_as_large_as_the_data_is_no_sample(tmp_path):
    _, result = small_run(tmp_path, max_steps=2, eval_batches=2)  # the toy data has two
    assert "valid_loss_full" not in result.valid and "valid_loss" in result.valid
