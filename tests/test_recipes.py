"""Defaults that learn: the recipe's rule (warm-up a fraction of a short run, the user's
values win), the probe that times steps without training, and the CLI recording the
values a run used."""

import json
import math

import pytest
import torch

from qkv.cli.main import main
from qkv.errors import InputError
from qkv.tasks.presets import CAPTIONER_SIZES, RECIPES, recipe_for
from qkv.training import TrainConfig, load_checkpoint
from qkv.training.checkpoint import load_trainer_state
from qkv.training.recipes import (
    WARMUP_FRACTION,
    Recipe,
    UserSchedule,
    choose_schedule,
    measure_steps_per_second,
    planned_steps,
)

RECIPE = Recipe(lr=3e-3, warmup_steps=200, max_tokens=1024)


def test_a_short_run_warms_up_over_a_fifth_of_its_steps():
    chosen = choose_schedule(RECIPE, UserSchedule(), planned=300)
    assert chosen.warmup_steps == 60 == math.ceil(WARMUP_FRACTION * 300)
    assert (chosen.lr, chosen.max_tokens) == (3e-3, 1024)
    assert "20% of ~300 planned steps" in chosen.reason


def test_a_long_or_unknown_run_keeps_the_recipes_warm_up():
    assert choose_schedule(RECIPE, UserSchedule(), planned=100_000).warmup_steps == 200
    assert choose_schedule(RECIPE, UserSchedule(), planned=None).warmup_steps == 200
    # the cut starts exactly where a tenth of the run is shorter than the recipe's warm-up
    assert choose_schedule(RECIPE, UserSchedule(), planned=1000).warmup_steps == 200
    assert choose_schedule(RECIPE, UserSchedule(), planned=995).warmup_steps == 199


def test_what_the_user_gives_wins():
    given = UserSchedule(lr=0.01, warmup_steps=7, max_tokens=333)
    chosen = choose_schedule(RECIPE, given, planned=300)
    assert (chosen.lr, chosen.warmup_steps, chosen.max_tokens) == (0.01, 7, 333)
    assert chosen.reason == "lr given, warm-up given"
    only_lr = choose_schedule(RECIPE, UserSchedule(lr=0.5), planned=300)
    assert (only_lr.lr, only_lr.warmup_steps) == (0.5, 60)


def test_planned_steps_is_the_smallest_budget():
    config = TrainConfig(epochs=3, max_steps=500, max_minutes=2.0)
    assert planned_steps(config, updates_per_epoch=100, steps_per_second=10.0) == 300
    assert planned_steps(config, updates_per_epoch=1000, steps_per_second=10.0) == 500
    assert planned_steps(config, updates_per_epoch=1000, steps_per_second=1.0) == 120
    clock_only = TrainConfig(epochs=None, max_minutes=2.0)
    assert planned_steps(clock_only, updates_per_epoch=None, steps_per_second=None) is None
    assert planned_steps(TrainConfig(epochs=4), updates_per_epoch=None) is None


def test_every_family_has_a_recipe_and_the_paper_keeps_its_warm_up():
    for family, size in [(f, s) for f in ("transformer", "rnn") for s in ("small", "medium")]:
        assert recipe_for(family, size).lr > 0
    # a published value, not a tuned one: Vaswani et al. (2017), section 5.3
    assert RECIPES[("transformer", "base")].warmup_steps == 4000
    with pytest.raises(InputError, match="no training recipe for rnn/huge"):
        recipe_for("rnn", "huge")


def test_timing_steps_leaves_the_model_as_it_was():
    from qkv.data import Batch
    from qkv.models import RNNConfig, build_model

    torch.manual_seed(0)
    model = build_model("rnn-attention", RNNConfig(20, embedding_dim=8, hidden_dim=8, dropout=0.1))
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = Batch(torch.randint(4, 20, (3, 5)), torch.randint(4, 20, (3, 6)), torch.arange(3))
    random_state = torch.get_rng_state()
    speed = measure_steps_per_second(model, batch, repeats=2)
    assert 0 < speed < math.inf
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert not model.training and torch.equal(torch.get_rng_state(), random_state)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    pairs = [(f"ab{c}", f"{c}ba") for c in "cdefghijklmnop"]
    (root / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    (root / "valid.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[:4]), encoding="utf-8")
    return root


def _train(corpus, out, *extra):
    argv = ["train", "translation", "--data", str(corpus / "{split}.tsv"), "--out", str(out)]
    argv += ["--tokenizer", "char", "--validate-every", "10", "--threads", "1", "--device", "cpu"]
    return main([*argv, *extra])


def _fitted(recipe: Recipe, planned: int):
    """What the run should use: ``recipe`` fitted to ``planned`` steps, as
    (lr, warm-up, batch tokens), and the line the CLI says it with (reason left out)."""
    chosen = choose_schedule(recipe, UserSchedule(), planned=planned)
    values = (chosen.lr, chosen.warmup_steps, chosen.max_tokens)
    return values, chosen.describe().partition(" (")[0], chosen


def test_the_cli_fits_the_schedule_to_the_run_and_records_it(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    # 14 pairs make one batch: 10 epochs would plan 10 steps, so the epochs are unbounded
    assert (
        _train(corpus, out, "--max-steps", "20", "--epochs", "0", "--model", "rnn-attention") == 0
    )
    # the recipe of the size the run takes (small), fitted to the 20 steps it plans
    values, line, chosen = _fitted(recipe_for("rnn", "small"), planned=20)
    said = capsys.readouterr().out
    assert line in said
    saved = load_trainer_state(out / "checkpoints" / "step-000020")["train_config"]
    assert (saved["lr"], saved["warmup_steps"], saved["max_tokens"]) == values
    metadata = load_checkpoint(out).metadata["schedule"]
    assert metadata["warmup_steps"] == chosen.warmup_steps and metadata["reason"] == chosen.reason
    # resumed with a larger budget: the run keeps the values it started with
    resumed = ["--max-steps", "30", "--epochs", "0", "--model", "rnn-attention", "--resume"]
    assert _train(corpus, out, *resumed) == 0
    saved = load_trainer_state(out / "checkpoints" / "step-000030")["train_config"]
    assert (saved["lr"], saved["warmup_steps"]) == values[:2]


def test_explicit_values_win_through_the_cli(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--max-steps", "3", "--lr", "0.01", "--warmup-steps", "1", "--max-tokens", "64"]
    argv += ["--epochs", "0"]
    assert _train(corpus, out, *argv) == 0
    saved = load_trainer_state(out / "checkpoints" / "step-000003")["train_config"]
    assert (saved["lr"], saved["warmup_steps"], saved["max_tokens"]) == (0.01, 1, 64)
    assert "lr given, warm-up given" in capsys.readouterr().out


def test_a_clock_budget_is_timed_before_the_run(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, "--max-minutes", "0.05", "--epochs", "0") == 0
    said = capsys.readouterr().out
    assert "steps/s measured" in said
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "end"


def test_captioning_takes_the_captioners_recipe(tmp_path, capsys):
    out = tmp_path / "cap"
    argv = ["train", "captioning", "--data", "shapes", "--out", str(out), "--train-size", "8"]
    argv += ["--valid-size", "2", "--image-size", "32", "--grid", "4", "--min-count", "1"]
    for flag in ("--feature-dim", "--embedding-dim", "--hidden-dim", "--attention-dim"):
        argv += [flag, "8"]
    argv += ["--max-steps", "10", "--epochs", "0", "--threads", "1", "--device", "cpu"]
    assert main(argv) == 0
    preset = CAPTIONER_SIZES["default"]
    values, line, _ = _fitted(preset.recipe, planned=10)
    assert line in capsys.readouterr().out
    saved = load_trainer_state(out / "checkpoints" / "step-000010")["train_config"]
    assert (saved["lr"], saved["warmup_steps"], saved["max_tokens"]) == values
    assert preset.train and {name: saved[name] for name in preset.train} == dict(preset.train)


def test_a_gpu_run_is_not_timed_on_the_cpu(monkeypatch):
    """The model is still on the CPU when the schedule is fitted: timing it there would
    plan a GPU run far too short, so a GPU run keeps the recipe's warm-up."""
    from qkv.data import Batch
    from qkv.models import RNNConfig, build_model
    from qkv.training.recipes import fit_train_config

    model = build_model("rnn", RNNConfig(20, embedding_dim=8, hidden_dim=8))
    batch = Batch(torch.randint(4, 20, (2, 4)), torch.randint(4, 20, (2, 5)), torch.arange(2))
    config = TrainConfig(epochs=None, max_minutes=1.0, device="auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fitted, chosen = fit_train_config(
        config, RECIPE, UserSchedule(), model=model, sample=lambda c: (batch, None)
    )
    assert fitted.warmup_steps == 200 and "measured" not in chosen.reason
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, chosen = fit_train_config(
        config, RECIPE, UserSchedule(), model=model, sample=lambda c: (batch, None)
    )
    assert "steps/s measured" in chosen.reason


def test_min_lr_reaches_the_run_and_is_checked_against_the_recipes_peak(corpus, tmp_path, capsys):
    peak = recipe_for("rnn", "small").lr  # the run's size
    # just below the recipe's peak (TrainConfig's own lr is no bound): accepted
    floor = f"{0.9 * peak:g}"
    out = tmp_path / "floor"
    argv = ["--max-steps", "3", "--epochs", "0", "--model", "rnn-attention", "--min-lr", floor]
    assert _train(corpus, out, *argv, "--schedule", "plateau") == 0
    saved = load_trainer_state(out / "checkpoints" / "step-000003")["train_config"]
    assert (saved["lr"], saved["min_lr"], saved["schedule"]) == (peak, float(floor), "plateau")
    # above the peak: one line naming both values, before any training
    high = f"{2 * peak:g}"
    above = ["--max-steps", "3", "--epochs", "0", "--model", "rnn-attention", "--min-lr", high]
    assert _train(corpus, tmp_path / "above", *above) == 2
    said = capsys.readouterr().err
    assert f"error: min_lr={high} is above the peak learning rate {peak:g}" in said
    assert f"(set by --min-lr {high}, --lr)" in said
    assert not (tmp_path / "above" / "checkpoints").exists()
