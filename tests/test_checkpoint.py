"""Checkpoints: round trips, clear errors, crash safety (including kill -9 and resume)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import torch

import qkv.training.checkpoint as checkpoint_module
from qkv.data.tokenizers import CharTokenizer
from qkv.training import load_checkpoint, read_pointer, resolve_checkpoint, save_checkpoint
from qkv.training.checkpoint import load_trainer_state
from tests.train_worker import (
    ToyConfig,
    ToySeq2Seq,
    parameters,
    run_copy_training,
    slow_copy_training,
)


def toy(seed: int = 0, **fields) -> ToySeq2Seq:
    torch.manual_seed(seed)
    return ToySeq2Seq(ToyConfig(**fields))


def test_round_trip_keeps_weights_config_metadata_and_tokenizers(tmp_path):
    model = toy(dim=8)
    tokenizer = CharTokenizer(list("abc"))
    directory = save_checkpoint(
        tmp_path, model, step=7, metadata={"corpus": "toy"}, tokenizers={"source": tokenizer}
    )
    assert directory == tmp_path / "checkpoints" / "step-000007"
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "toy-seq2seq" and config["model"]["dim"] == 8
    assert "qkv_version" in config
    loaded = load_checkpoint(tmp_path, expect_type="toy-seq2seq")
    assert loaded.config == model.config and loaded.metadata == {"corpus": "toy"}
    assert loaded.step == 7 and loaded.directory == directory and not loaded.model.training
    assert loaded.tokenizers["source"].encode("cab") == tokenizer.encode("cab")
    for name, value in parameters(model).items():
        assert torch.equal(loaded.model.state_dict()[name], value)


def test_tied_weights_are_stored_once_and_stay_tied(tmp_path):
    model = toy(tie_embeddings=True)
    directory = save_checkpoint(tmp_path, model, step=1)
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        stored = set(handle.keys())
    assert ("output.weight" in stored) != ("target_embedding.weight" in stored)
    loaded = load_checkpoint(directory).model
    assert loaded.output.weight is loaded.target_embedding.weight
    assert torch.equal(loaded.output.weight, model.output.weight)


def test_a_run_directory_resolves_to_best_else_last(tmp_path):
    save_checkpoint(tmp_path, toy(1), step=1)
    assert resolve_checkpoint(tmp_path).name == "step-000001"
    save_checkpoint(tmp_path, toy(2), step=2, best={"metric": "bleu", "value": 3.0})
    save_checkpoint(tmp_path, toy(3), step=3)
    assert resolve_checkpoint(tmp_path).name == "step-000002"  # best wins
    assert read_pointer(tmp_path, "last").name == "step-000003"
    # older checkpoints that no pointer names are pruned
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-000002",
        "step-000003",
    ]
    step_dir = tmp_path / "checkpoints" / "step-000003"
    assert torch.equal(load_checkpoint(step_dir).model.output.bias, toy(3).output.bias)


def test_load_errors_name_the_problem_in_one_line(tmp_path):
    def error(path, **options) -> str:
        with pytest.raises(ValueError) as caught:
            load_checkpoint(path, **options)
        message = str(caught.value)
        assert "\n" not in message
        return message

    assert "does not exist" in error(tmp_path / "nowhere")
    assert "neither a checkpoint" in error(tmp_path)
    directory = save_checkpoint(tmp_path / "run", toy(), step=1)
    assert "'toy-seq2seq' model, not the 'transformer'" in error(
        directory, expect_type="transformer"
    )

    weights = directory / "model.safetensors"
    good_weights = weights.read_bytes()
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header")
    assert "model.safetensors are corrupt" in error(directory)
    weights.unlink()
    assert "model.safetensors are missing" in error(directory)
    weights.write_bytes(good_weights)

    config_file = directory / "config.json"
    good_config = config_file.read_text()
    config_file.write_text(good_config[:40])
    assert "config.json is not valid JSON" in error(tmp_path / "run")
    changed = json.loads(good_config)
    changed["model"]["dim"] = 8
    config_file.write_text(json.dumps(changed))
    message = error(directory)
    assert "do not match" in message and "combine.weight (16, 32) in the file vs (8, 16)" in message
    config_file.write_text(good_config)

    (tmp_path / "run" / "last.json").write_text(json.dumps({"checkpoint": "checkpoints/gone"}))
    assert "names" in error(tmp_path / "run") and "gone" in error(tmp_path / "run")
    with pytest.raises(ValueError, match="trainer_state.pt is missing"):
        load_trainer_state(directory)


def test_an_additive_rnn_saved_when_attention_dim_none_meant_2h_loads_as_it_was(tmp_path):
    """Before 2026-12-01 ``attention_dim=None`` built Bahdanau's score as wide as the encoder
    states (2H); it now means H.  Such a checkpoint (config None, weights 2H wide) loads
    with its own width and computes what it computed."""
    from qkv.models import RNNConfig, build_model

    fresh = build_model("rnn-attention", RNNConfig(20, hidden_dim=8, attention="additive"))
    assert fresh.decoder.attention.score.key_proj.out_features == 8  # None: H
    torch.manual_seed(0)
    old = build_model("rnn-attention", RNNConfig(20, hidden_dim=8, attention_dim=16)).eval()
    directory = save_checkpoint(tmp_path, old, step=1)
    config = json.loads((directory / "config.json").read_text())
    config["model"]["attention_dim"] = None  # what the old code wrote
    (directory / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(tmp_path).model
    assert loaded.config.attention_dim == 16
    source, target = torch.randint(1, 20, (2, 5)), torch.randint(1, 20, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(loaded(source, target).logits, old(source, target).logits)


def test_a_crash_while_writing_never_moves_a_pointer(tmp_path, monkeypatch):
    first = save_checkpoint(tmp_path, toy(1), step=1, best={"metric": "valid_loss", "value": 1.0})
    real_save_file = checkpoint_module.save_file

    def crash_mid_write(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "save_file", crash_mid_write)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, toy(2), step=2, best={"metric": "valid_loss", "value": 0.5})
    assert read_pointer(tmp_path, "last") == read_pointer(tmp_path, "best") == first
    assert torch.equal(load_checkpoint(tmp_path).model.output.bias, toy(1).output.bias)

    # a crash between the new directory's rename and the pointer update: same story
    monkeypatch.setattr(checkpoint_module, "save_file", real_save_file)
    real_pointer_write = checkpoint_module.write_json_atomic

    def crash_on_pointer(path, value):
        if Path(path).name in ("last.json", "best.json"):
            raise OSError("power cut")
        real_pointer_write(path, value)

    monkeypatch.setattr(checkpoint_module, "write_json_atomic", crash_on_pointer)
    with pytest.raises(OSError, match="power cut"):
        save_checkpoint(tmp_path, toy(2), step=2)
    assert read_pointer(tmp_path, "last") == first
    monkeypatch.setattr(checkpoint_module, "write_json_atomic", real_pointer_write)
    second = save_checkpoint(tmp_path, toy(3), step=2)  # replaces the unnamed leftover
    assert read_pointer(tmp_path, "last") == second
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    assert torch.equal(load_checkpoint(second).model.output.bias, toy(3).output.bias)


def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path):
    steps = 12
    reference = run_copy_training(tmp_path / "whole", max_steps=steps)
    out_dir = tmp_path / "killed"
    # a fresh (spawned) process: forking a parent whose thread pools ran can deadlock
    process = multiprocessing.get_context("spawn").Process(
        target=slow_copy_training, args=(out_dir, steps)
    )
    process.start()
    deadline = time.monotonic() + 120
    while not (out_dir / "last.json").exists():
        assert process.is_alive(), f"the worker died with exit code {process.exitcode}"
        assert time.monotonic() < deadline, "the worker wrote no checkpoint in 120 s"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    assert process.exitcode == -signal.SIGKILL
    stopped_at = json.loads((out_dir / "last.json").read_text())["step"]
    assert stopped_at < steps  # killed mid-run (a checkpoint every 3 steps)

    resumed = run_copy_training(out_dir, max_steps=steps, resume=True)
    for name, value in parameters(reference).items():
        assert torch.allclose(value, parameters(resumed)[name], atol=1e-6, rtol=0), name
