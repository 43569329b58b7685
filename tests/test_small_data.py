"""`--size small-data`: the published low-resource recipes for each translation model
family; the preset's values, the flags that override them, and a run of each family."""

from __future__ import annotations

import json

import pytest

from qkv.cli.main import main
from qkv.errors import InputError
from qkv.tasks.presets import PRESETS, recipe_for
from qkv.tasks.translation import TranslationSetup, build_translation_model, family_of
from qkv.training.checkpoint import load_trainer_state
from qkv.training.recipes import UserSchedule, choose_schedule

FAMILIES = ["transformer", "rnn-attention", "rnn"]


@pytest.mark.parametrize("model", FAMILIES)
def test_the_small_data_model_is_built_from_its_preset(model):
    """What docs/results.md measured is the preset; the built model must be that preset."""
    preset = PRESETS[(family_of(model), "small-data")]
    config = build_translation_model(TranslationSetup(model=model, size="small-data"), 100).config
    assert preset.model, "small-data sets the model's fields"
    assert {name: getattr(config, name) for name in preset.model} == dict(preset.model)
    if model != "transformer":  # the attention score is the setup's, not the preset's
        assert config.attention == ("none" if model == "rnn" else "additive")


def test_given_rates_override_the_preset():
    setup = TranslationSetup(
        size="small-data",
        dropout=0.2,
        attention_dropout=0.0,
        activation_dropout=0.25,
        word_dropout=0.05,
    )
    config = build_translation_model(setup, 100).config
    rates = (config.dropout, config.attention_dropout, config.activation_dropout)
    assert rates == (0.2, 0.0, 0.25) and config.word_dropout == 0.05
    rnn = TranslationSetup(model="rnn-attention", size="small-data", dropout=0.1)
    assert build_translation_model(rnn, 100).config.dropout == 0.1


@pytest.mark.parametrize("model", ["rnn-attention", "rnn"])
@pytest.mark.parametrize("site", ["attention_dropout", "activation_dropout", "word_dropout"])
def test_the_transformers_dropout_sites_are_refused_for_an_rnn(model, site):
    with pytest.raises(InputError, match=f"{site}=0.1 is a Transformer dropout site"):
        TranslationSetup(model=model, size="small-data", **{site: 0.1})


def test_small_data_trains_a_smaller_bpe_vocabulary_unless_one_is_given():
    small_data = TranslationSetup(size="small-data").bpe_vocab_size
    assert small_data < TranslationSetup(size="medium").bpe_vocab_size
    assert TranslationSetup(size="small-data", vocab_size=2000).bpe_vocab_size == 2000
    for model in FAMILIES:  # both families read the vocabulary from their own preset
        setup = TranslationSetup(model=model, size="small-data")
        assert setup.bpe_vocab_size == PRESETS[(family_of(model), "small-data")].vocab_size


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_recipe_picks_its_schedule_and_label_smoothing_unless_given(family):
    recipe = recipe_for(family, "small-data")
    assert recipe.schedule is not None and recipe.label_smoothing is not None
    chosen = choose_schedule(recipe, UserSchedule(), planned=None)
    assert (chosen.schedule, chosen.label_smoothing) == (recipe.schedule, recipe.label_smoothing)
    given = UserSchedule(schedule="inverse_sqrt", label_smoothing=0.0)
    chosen = choose_schedule(recipe, given, planned=None)
    assert (chosen.schedule, chosen.label_smoothing) == ("inverse_sqrt", 0.0)
    # the other sizes name neither: the run's TrainConfig keeps its own
    small = choose_schedule(recipe_for(family, "small"), UserSchedule(), planned=None)
    assert (small.schedule, small.label_smoothing) == (None, None)


def _train_dates(out, *extra) -> int:
    argv = ["train", "translation", "--size", "small-data", "--data", "dates", "--out", str(out)]
    argv += ["--max-steps", "3", "--max-tokens", "256", "--threads", "1", "--device", "cpu"]
    return main([*argv, "--log-every", "1", *extra])


@pytest.mark.parametrize("model", FAMILIES)
def test_each_family_trains_end_to_end_with_the_preset(model, tmp_path, capsys):
    out = tmp_path / model
    assert _train_dates(out, "--model", model) == 0
    recipe = recipe_for(family_of(model), "small-data")
    said = f"{recipe.schedule} schedule, label smoothing {recipe.label_smoothing:g}"
    assert said in capsys.readouterr().out
    saved = load_trainer_state(out / "checkpoints" / "step-000003")["train_config"]
    chosen = (saved["schedule"], saved["label_smoothing"], saved["lr"])
    assert chosen == (recipe.schedule, recipe.label_smoothing, recipe.lr)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    rates = [r["lr"] for r in log if r["event"] == "train"]
    assert len(rates) == 3 and max(rates) == recipe.lr  # warmed up to the recipe's peak
    assert any(r["event"] == "valid" and "lr" in r for r in log)


def test_explicit_flags_win_over_the_preset_and_stay_on_resume(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--schedule", "inverse_sqrt", "--label-smoothing", "0", "--word-dropout", "0.2"]
    assert _train_dates(out, *flags) == 0
    saved = load_trainer_state(out / "checkpoints" / "step-000003")
    config = saved["train_config"]
    assert (config["schedule"], config["label_smoothing"]) == ("inverse_sqrt", 0.0)
    assert saved["model_config"]["word_dropout"] == 0.2
    # resumed without repeating the schedule flags: the run keeps what it started with
    assert _train_dates(out, "--word-dropout", "0.2", "--max-steps", "4", "--resume") == 0
    assert "done: 4 steps" in capsys.readouterr().out
    resumed = load_trainer_state(out / "checkpoints" / "step-000004")["train_config"]
    assert (resumed["schedule"], resumed["label_smoothing"]) == ("inverse_sqrt", 0.0)
