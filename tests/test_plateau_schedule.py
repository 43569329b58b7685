"""The plateau schedule: warm-up, then a constant lr lowered when the validation loss stops
improving; by hand, through the optimizer, and in a run that is cut and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qkv.training import TrainConfig, read_pointer
from qkv.training.checkpoint import load_trainer_state
from qkv.training.schedules import PlateauLR, PlateauMultiplier, build_schedule, schedule_option
from tests.train_worker import ToyConfig, ToySeq2Seq, copy_data, parameters, small_run

PLATEAU_OPTIONS = {"plateau_factor", "plateau_patience"}


def test_the_multiplier_follows_a_hand_computed_sequence_of_validation_losses():
    plateau = PlateauMultiplier(warmup_steps=3, factor=0.5, patience=2, floor=0.2)
    # warm-up: update s (1-based, LambdaLR index s - 1) has s / 3, then 1
    assert [plateau(index) for index in range(5)] == pytest.approx([1 / 3, 2 / 3, 1, 1, 1])
    # (step of the validation, loss) -> (decayed?, scale after, validations without improvement)
    expected = [
        ((1, 5.0), (False, 1.0, 0)),  # the first loss is the best
        ((2, 5.5), (False, 1.0, 0)),  # worse, but still warming up: not counted
        ((3, 5.2), (False, 1.0, 1)),  # worse after warm-up: 1
        ((4, 4.0), (False, 1.0, 0)),  # better: the count restarts
        ((5, 4.5), (False, 1.0, 1)),
        ((6, 4.0), (True, 0.5, 0)),  # equal is no improvement: 2 = patience, decay
        ((7, 4.1), (False, 0.5, 1)),
        ((8, float("nan")), (True, 0.25, 0)),  # nan never improves
        ((9, 4.0), (False, 0.25, 1)),
        ((10, 5.0), (True, 0.2, 0)),  # 0.125 is below the floor 0.2
        ((11, 6.0), (False, 0.2, 1)),
        ((12, 6.0), (False, 0.2, 0)),  # at the floor: nothing left to lower
        ((13, 3.0), (False, 0.2, 0)),  # an improvement does not raise the lr again
    ]
    for (step, loss), (decayed, scale, bad) in expected:
        assert plateau.observe(loss, step=step) is decayed, step
        assert (plateau.scale, plateau.bad_validations) == (scale, bad), step
    assert plateau.best == 3.0
    assert plateau(12) == 0.2  # after warm-up the multiplier is the scale


def test_observe_lowers_the_next_updates_lr_at_once_and_the_state_round_trips():
    model = torch.nn.Linear(2, 2)

    def two_groups() -> torch.optim.Optimizer:  # as make_optimizer's (decayed or not)
        groups = [{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=0.1)

    optimizer = two_groups()
    scheduler = build_schedule(
        "plateau", optimizer, warmup_steps=2, plateau_factor=0.1, plateau_patience=1
    )
    assert isinstance(scheduler, PlateauLR)
    rates = []
    for _ in range(3):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.05, 0.1, 0.1])
    assert scheduler.observe(1.0) is False
    assert scheduler.observe(2.0) is True
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([0.01, 0.01])
    assert scheduler.get_last_lr() == pytest.approx([0.01, 0.01])
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr() == pytest.approx([0.01, 0.01])  # and stays there
    saved = scheduler.state_dict()
    fresh = build_schedule(
        "plateau", two_groups(), warmup_steps=2, plateau_factor=0.1, plateau_patience=1
    )
    fresh.load_state_dict(saved)
    assert (fresh.multiplier.scale, fresh.multiplier.best) == pytest.approx((0.1, 1.0))
    assert fresh.multiplier(fresh.last_epoch) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"plateau_factor": 1.0}, "plateau_factor=1.0"),
        ({"plateau_factor": 0.0}, "plateau_factor=0.0"),
        ({"plateau_factor": -0.5}, "plateau_factor=-0.5"),
        ({"plateau_patience": 0}, "plateau_patience=0"),
    ],
)
def test_bad_plateau_values_are_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(schedule="plateau", schedule_options=fields)
    with pytest.raises(ValueError, match=message.split("=")[0]):
        build_schedule(
            "plateau",
            torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0),
            warmup_steps=0,
            **fields,
        )


def test_the_plateau_schedule_needs_validation_data(tmp_path):
    from qkv.training import train

    config = TrainConfig(schedule="plateau", epochs=None, max_steps=2, device="cpu")
    with pytest.raises(ValueError, match="schedule='plateau' needs valid_data"):
        train(ToySeq2Seq(ToyConfig()), copy_data(8, seed=1), None, config, tmp_path)


def records(out_dir: Path, event: str) -> list[dict]:
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


# lr 0.2 is too high for the toy model on purpose: its validation loss goes up and down, so
# the schedule decays several times in 16 steps
PLATEAU = dict(
    schedule="plateau",
    lr=0.2,
    warmup_steps=2,
    schedule_options={"plateau_patience": 2},
    validate_every=1,
    log_every=1,
)


def test_a_plateau_run_resumed_mid_count_continues_exactly(tmp_path):
    whole, _ = small_run(tmp_path / "whole", max_steps=16, **PLATEAU)
    small_run(tmp_path / "cut", max_steps=8, **PLATEAU)
    # the cut falls between two validations without improvement: the resumed run must
    # remember the first to decay after the second
    saved = load_trainer_state(read_pointer(tmp_path / "cut", "last"))
    assert saved["scheduler"]["lr_lambdas"][0]["bad_validations"] == 1
    resumed, result = small_run(tmp_path / "cut", max_steps=16, resume=True, **PLATEAU)
    assert result.steps == 16
    for name, value in parameters(whole).items():
        assert torch.equal(value, parameters(resumed)[name]), name
    for event in ("train", "valid"):
        rates = [(r["step"], r["lr"]) for r in records(tmp_path / "whole", event)]
        assert [(r["step"], r["lr"]) for r in records(tmp_path / "cut", event)] == rates
    # the log shows the decays: by the factor 0.5, after warm-up
    valid_rates = [r["lr"] for r in records(tmp_path / "whole", "valid")]
    assert len(set(valid_rates)) >= 3 and valid_rates == sorted(valid_rates, reverse=True)
    assert all(round(0.2 / rate, 6) in (1, 2, 4, 8, 16, 32) for rate in valid_rates)


def test_early_stopping_with_a_longer_patience_stops_after_the_decays(tmp_path):
    _, result = small_run(
        tmp_path,
        max_steps=60,
        patience=6,
        **{**PLATEAU, "schedule_options": {"plateau_patience": 1}},
    )
    assert result.stop_reason == "early_stopping" and result.steps < 60
    valid = records(tmp_path, "valid")
    assert valid[-1]["lr"] < valid[0]["lr"] / 2  # the lower rates were tried before stopping


def test_min_lr_is_the_plateau_schedules_floor_in_a_run(tmp_path):
    small_run(tmp_path, max_steps=16, min_lr=0.05, **PLATEAU)
    rates = [r["lr"] for r in records(tmp_path, "train")]
    after_warm_up = rates[PLATEAU["warmup_steps"] :]
    # halved twice: 0.2 -> 0.1 -> 0.05, then held at the floor
    assert min(after_warm_up) == pytest.approx(0.05) and max(after_warm_up) == pytest.approx(0.2)
    assert all(rate >= 0.05 - 1e-12 for rate in rates)


def test_a_checkpoint_older_than_the_plateau_fields_still_resumes():
    from qkv.training.state import check_resumable

    config = TrainConfig(device="cpu")
    older = {k: v for k, v in config.to_dict().items() if k != "schedule_options"}
    saved = dict(
        model_type="toy",
        model_config={"dim": 1},
        train_config=older,
        data_fingerprint="f",
        world_size=1,
    )
    arguments = dict(model_type="toy", model_config={"dim": 1}, fingerprint="f", world_size=1)
    check_resumable(saved, train_config=config, directory="old", **arguments)
    with pytest.raises(
        ValueError, match=r"train\.schedule_options \{\} -> \{'plateau_factor': 0\.3\}"
    ):
        other = TrainConfig(device="cpu", schedule_options={"plateau_factor": 0.3})
        check_resumable(saved, train_config=other, directory="old", **arguments)


def test_a_checkpoint_with_the_plateau_knobs_as_fields_resumes_with_them():
    """Before ``schedule_options`` every TrainConfig carried plateau_factor and
    plateau_patience; such a plateau run resumes with the same values, and only with them."""
    from qkv.training.state import check_resumable

    config = TrainConfig(device="cpu", schedule="plateau")
    defaults = {name: schedule_option(name).default for name in config.schedule_options}
    assert config.schedule_options == defaults and set(defaults) == PLATEAU_OPTIONS
    legacy = {k: v for k, v in config.to_dict().items() if k != "schedule_options"}
    legacy |= {"plateau_factor": 0.25, "plateau_patience": 3}
    saved = dict(
        model_type="toy",
        model_config={"dim": 1},
        train_config=legacy,
        data_fingerprint="f",
        world_size=1,
    )
    arguments = dict(model_type="toy", model_config={"dim": 1}, fingerprint="f", world_size=1)
    same = {"plateau_factor": 0.25, "plateau_patience": 3}
    check_resumable(
        saved,
        train_config=TrainConfig(device="cpu", schedule="plateau", schedule_options=same),
        directory="old",
        **arguments,
    )
    with pytest.raises(ValueError, match="train.schedule_options"):
        check_resumable(saved, train_config=config, directory="old", **arguments)


def test_schedules_come_from_a_registry_and_only_the_plateau_reads_its_fields(monkeypatch):
    from torch.optim.lr_scheduler import LambdaLR

    from qkv.training import schedules

    assert schedules.available_schedules() == ("inverse_sqrt", "cosine", "plateau")
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0)
    options = dict(plateau_factor=0.25, plateau_patience=3)
    plateau = build_schedule("plateau", optimizer, warmup_steps=0, **options)
    assert (plateau.multiplier.factor, plateau.multiplier.patience) == (0.25, 3)
    assert isinstance(
        build_schedule("inverse_sqrt", optimizer, warmup_steps=2, **options), LambdaLR
    )
    # a new schedule is one registration; TrainConfig and the trainer's checks read its kind
    constant = schedules.ScheduleKind("constant", lambda opt, **_: LambdaLR(opt, lambda i: 1.0))
    monkeypatch.setitem(schedules._SCHEDULES, "constant", constant)
    assert TrainConfig(schedule="constant").schedule == "constant"
    assert build_schedule("constant", optimizer, warmup_steps=5).get_last_lr() == [1.0]
    long = schedules.ScheduleKind("long", lambda opt, **_: None, needs_length=True)
    monkeypatch.setitem(schedules._SCHEDULES, "long", long)
    with pytest.raises(ValueError, match="schedule='long' needs a known length"):
        TrainConfig(schedule="long", epochs=None, max_minutes=1.0)
    with pytest.raises(ValueError, match="schedule='linear' is unknown; use one of"):
        TrainConfig(schedule="linear")


def test_the_plateau_flags_set_the_schedules_options_and_trainconfig_has_no_plateau_field():
    import dataclasses

    from qkv.cli.main import build_parser
    from qkv.cli.options import given_train_values
    from qkv.tasks.presets import preset_for
    from qkv.tasks.task import train_config

    assert not [f.name for f in dataclasses.fields(TrainConfig) if f.name.startswith("plateau")]
    argv = ["train", "translation", "--out", "x", "--schedule", "plateau"]
    args = build_parser().parse_args([*argv, "--plateau-factor", "0.25"])
    given = given_train_values(args)
    assert given["schedule_options"] == {"plateau_factor": 0.25}
    config = train_config(preset_for("transformer", "small"), given)
    patience = schedule_option("plateau_patience").default  # not given: the option's own
    assert config.schedule_options == {"plateau_factor": 0.25, "plateau_patience": patience}
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0)
    scheduler = build_schedule("plateau", optimizer, warmup_steps=0, **config.schedule_options)
    assert (scheduler.multiplier.factor, scheduler.multiplier.patience) == (0.25, patience)
    # the other schedules read no option; their configs carry none unless given
    assert TrainConfig().schedule_options == {}
