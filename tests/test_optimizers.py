"""The trainer's optimizers: Muon on the hidden matrices with AdamW on the rest, as one
optimizer that schedules, clips, checkpoints and resumes like AdamW."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from qkv.cli.main import main as cli_main
from qkv.models import gpt, nanochat
from qkv.training import TrainConfig
from qkv.training.optimizer import MuonAdamW, make_optimizer, muon_matrices
from tests.train_worker import parameters, small_run


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _names(model: nn.Module, chosen: list[nn.Parameter]) -> set[str]:
    ids = {id(p) for p in chosen}
    return {name for name, p in model.named_parameters() if id(p) in ids}


@pytest.mark.parametrize("builder", [gpt, nanochat])
def test_muon_takes_the_hidden_matrices_and_leaves_embeddings_head_and_vectors(builder):
    model = builder(vocab_size=50, d_model=16, num_heads=2, num_layers=2, max_len=8)
    names = _names(model, muon_matrices(model))
    matrices = {
        name
        for name, p in model.named_parameters()
        if p.dim() == 2 and name.startswith("blocks.")  # the packed QKV, out, MLP maps
    }
    assert names == matrices and len(names) == 2 * 4
    assert not any("embedding" in name or name.startswith("output") for name in names)


def test_the_combined_step_is_torchs_muon_and_adamw_side_by_side():
    torch.manual_seed(0)
    model = nanochat(vocab_size=40, d_model=16, num_heads=2, num_layers=2, max_len=8).eval()
    reference = copy.deepcopy(model)
    config = TrainConfig(lr=3e-3, optimizer="muon", weight_decay=0.1, betas=(0.9, 0.95))
    combined = make_optimizer(model, config)
    assert isinstance(combined, MuonAdamW)
    hidden = {id(p) for p in muon_matrices(reference)}
    muon = torch.optim.Muon(
        [p for p in reference.parameters() if id(p) in hidden],
        lr=3e-3,
        weight_decay=0.1,
        adjust_lr_fn="match_rms_adamw",
    )
    rest = [p for p in reference.parameters() if id(p) not in hidden]
    adamw = torch.optim.AdamW(
        [
            {"params": [p for p in rest if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=3e-3,
        betas=(0.9, 0.95),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(combined, lambda step: 1.0 / (step + 1))
    ids = torch.randint(0, 40, (3, 9))
    for step in range(3):
        for net, optimizers in ((model, [combined]), (reference, [muon, adamw])):
            net.loss(ids).backward()
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad()
        schedule.step()  # the schedule reaches Muon's groups and AdamW's alike
        for group in [*muon.param_groups, *adamw.param_groups]:
            group["lr"] = 3e-3 / (step + 2)
        assert {g["lr"] for g in combined.param_groups} == {3e-3 / (step + 2)}
    for name, value in parameters(reference).items():
        torch.testing.assert_close(parameters(model)[name], value, rtol=0, atol=1e-6)


def test_a_muon_run_resumes_exactly_as_if_never_interrupted(tmp_path):
    options = dict(optimizer="muon", accumulate=2, log_every=1)
    whole, _ = small_run(tmp_path / "whole", max_steps=6, **options)
    small_run(tmp_path / "cut", max_steps=3, **options)
    resumed, result = small_run(tmp_path / "cut", max_steps=6, resume=True, **options)
    assert result.steps == 6
    for name, value in parameters(whole).items():
        assert torch.equal(value, parameters(resumed)[name]), name


def test_resuming_with_another_optimizer_is_refused(tmp_path):
    small_run(tmp_path / "run", max_steps=2)
    with pytest.raises(Exception, match="optimizer"):
        small_run(tmp_path / "run", max_steps=3, resume=True, optimizer="muon")


def test_an_unknown_optimizer_is_named():
    with pytest.raises(ValueError, match="optimizer='sgd' is unknown; use one of"):
        TrainConfig(optimizer="sgd")


def test_without_torchs_muon_the_run_says_so_and_uses_adamw(monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon")
    model = gpt(vocab_size=20, d_model=8, num_heads=2, num_layers=1, max_len=4)
    with pytest.warns(UserWarning, match="needs torch>=2.9"):
        optimizer = make_optimizer(model, TrainConfig(optimizer="muon"))
    assert type(optimizer) is torch.optim.AdamW


def test_qkv_train_lm_with_muon_learns(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 400 + "\n" + "the cat sat on the mat. " * 20)
    out = tmp_path / "run"
    argv = ["train", "lm", "--data", str(text), "--out", str(out), "--optimizer", "muon"]
    argv += ["--context", "16", "--max-steps", "40", "--validate-every", "40", "--log-every", "5"]
    argv += ["--threads", "1"]
    assert cli_main(argv) == 0
    log = [line for line in (out / "log.jsonl").read_text().splitlines() if '"train"' in line]
    first, last = (json.loads(line)["loss"] for line in (log[0], log[-1]))
    assert last < 0.5 * first
