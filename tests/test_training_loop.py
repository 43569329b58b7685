"""The training loop's parts, each alone: what a step does (TrainStep), when the loop stops,
logs and validates (loop.py), the log window, and what a resumed run keeps of its schedule."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from qkv.training import TrainConfig, seed_everything, train
from qkv.training.distributed import setup_distributed
from qkv.training.loop import agree_before_step, budget_spent, log_now, step_groups, validate_now
from qkv.training.optimizer import make_optimizer
from qkv.training.progress import LossWindow
from qkv.training.schedules import build_schedule
from qkv.training.state import TrainerState
from qkv.training.step import TrainStep
from tests.train_worker import (
    FixedBatches,
    ToyConfig,
    ToySeq2Seq,
    copy_data,
    parameters,
    small_run,
)

# ---------------------------------------------------------------------------- loop decisions


def test_step_groups_cut_the_rest_of_an_epoch_into_accumulation_groups():
    batches = [[0], [1], [2], [3], [4]]
    assert list(step_groups(batches, position=0, accumulate=2)) == [[[0], [1]], [[2], [3]], [[4]]]
    assert list(step_groups(batches, position=3, accumulate=4)) == [[[3], [4]]]
    assert list(step_groups(batches, position=5, accumulate=1)) == []


def test_budgets_validation_and_logging_cadence():
    config = TrainConfig(epochs=2, max_steps=10)
    assert budget_spent(TrainerState(step=9, epoch=1), config) is None
    assert budget_spent(TrainerState(step=10, epoch=1), config) == "max_steps"
    assert budget_spent(TrainerState(step=4, epoch=2), config) == "epochs"
    assert budget_spent(TrainerState(step=10, epoch=2), config) == "max_steps"
    assert [s for s in range(1, 13) if log_now(s, log_every=5)] == [5, 10]
    every_4 = [
        s
        for s in range(1, 13)
        if validate_now(s, epoch_ended=s == 6, stopping=s == 11, validate_every=4)
    ]
    assert every_4 == [4, 6, 8, 11, 12]
    only_ends = [
        s
        for s in range(1, 13)
        if validate_now(s, epoch_ended=s == 6, stopping=False, validate_every=0)
    ]
    assert only_ends == [6]


def test_a_single_process_agreement_stops_on_a_signal_before_the_clock():
    context = setup_distributed("cpu")
    assert agree_before_step(7, out_of_time=False, interrupted=False, context=context).stop is None
    agreed = agree_before_step(7, out_of_time=True, interrupted=True, context=context)
    assert agreed.global_tokens == 7.0 and agreed.stop == "interrupted"
    agreed = agree_before_step(3, out_of_time=True, interrupted=False, context=context)
    assert agreed.stop == "max_minutes"


def test_the_loss_window_sums_pauses_and_resets():
    window = LossWindow(torch.device("cpu"), loss=1.5, tokens=3.0, seconds=2.0)
    window.add(torch.tensor(2.5, dtype=torch.float64), 5.0)
    total, mean = window.checked_loss(setup_distributed("cpu"), step=1)
    assert (total, mean) == (4.0, 0.5)
    assert window.seconds >= 2.0
    with window.paused():
        frozen = window.seconds
        assert window.seconds == frozen  # the clock stops while paused
    window.add(torch.tensor(float("nan"), dtype=torch.float64), 1.0)
    with pytest.raises(FloatingPointError, match="became nan by step 7"):
        window.checked_loss(setup_distributed("cpu"), step=7)
    window.reset()
    assert window.tokens == 0.0 and float(window.loss) == 0.0 and window.seconds < 1.0


# ---------------------------------------------------------------------------- one step


def one_step(model, batches, config) -> torch.Tensor:
    optimizer = make_optimizer(model, config)
    scheduler = build_schedule(config.schedule, optimizer, warmup_steps=config.warmup_steps)
    step = TrainStep(model, model, optimizer, scheduler, config, setup_distributed("cpu"))
    tokens = sum(batch.num_target_tokens for batch in batches)
    return step(batches, global_tokens=float(tokens))


def test_four_accumulated_batches_update_like_one_batch_of_all_their_examples():
    # lengths 1..8: each micro-batch pads to its own longest, the big batch to the longest of
    # all, and the micro-batches hold different token counts (3+4, 4+5, ...)
    data = copy_data(8, seed=2, lengths=(1, 8))
    config = TrainConfig(lr=0.05, warmup_steps=1, clip_norm=0.5, label_smoothing=0.1, device="cpu")
    groups = [[0, 1], [2, 3], [4, 5], [6, 7]]
    seed_everything(0)
    accumulated = ToySeq2Seq(ToyConfig())
    whole = ToySeq2Seq(ToyConfig())
    whole.load_state_dict(accumulated.state_dict())
    micro = [data.collate(group) for group in groups]
    # each micro-batch pads to its own longest target, and they hold different numbers of
    # tokens: a mean of per-batch means would weigh tokens differently and fail this test
    assert len({batch.target_output.shape[1] for batch in micro}) > 1
    assert len({batch.num_target_tokens for batch in micro}) > 1
    loss_of_micro = one_step(accumulated, micro, config)
    loss_of_whole = one_step(whole, [data.collate(list(range(8)))], config)
    assert torch.allclose(loss_of_micro, loss_of_whole, atol=1e-5)
    for name, value in parameters(whole).items():
        assert torch.allclose(value, parameters(accumulated)[name], atol=1e-6, rtol=1e-5), name
    with pytest.raises(ValueError, match="target tokens"):
        one_step(whole, [], config)


def test_train_with_accumulate_4_equals_train_with_the_4x_batch(tmp_path):
    data = copy_data(16, seed=8, lengths=(1, 7))
    options = dict(lr=0.02, warmup_steps=1, epochs=None, max_steps=2, validate_every=0)
    runs = {}
    for name, accumulate, batches in (
        ("micro", 4, [[i, i + 1] for i in range(0, 16, 2)]),
        ("whole", 1, [list(range(0, 8)), list(range(8, 16))]),
    ):
        seed_everything(3)
        model = ToySeq2Seq(ToyConfig())
        config = TrainConfig(accumulate=accumulate, device="cpu", **options)
        train(model, data, None, config, tmp_path / name, train_batches=FixedBatches(batches))
        runs[name] = parameters(model)
    for name, value in runs["whole"].items():
        assert torch.allclose(value, runs["micro"][name], atol=1e-6, rtol=1e-5), name


# ---------------------------------------------------------------------------- resuming


def records(out_dir: Path, event: str) -> list[dict]:
    lines = (out_dir / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def test_a_resumed_run_logs_the_same_averages_over_the_same_steps(tmp_path):
    # logs every 4 steps, checkpoints every 3: the checkpoint at 6 falls inside a log window
    small_run(tmp_path / "whole", max_steps=12, log_every=4, validate_every=3)
    small_run(tmp_path / "cut", max_steps=6, log_every=4, validate_every=3)
    small_run(tmp_path / "cut", max_steps=12, log_every=4, validate_every=3, resume=True)
    whole, cut = records(tmp_path / "whole", "train"), records(tmp_path / "cut", "train")
    assert [r["step"] for r in cut] == [4, 8, 12]
    assert [(r["step"], r["loss"], r["lr"]) for r in cut] == [
        (r["step"], r["loss"], r["lr"]) for r in whole
    ]


def test_a_cosine_run_keeps_its_length_when_resumed_with_other_budgets(tmp_path, monkeypatch):
    cosine = dict(schedule="cosine", warmup_steps=1, min_lr=1e-3, log_every=1)
    # started for 4 steps, extended to 7: the decay ends at step 4, then min_lr
    small_run(tmp_path / "short", max_steps=4, **cosine)
    with pytest.warns(UserWarning, match="ends at step 4"):
        small_run(tmp_path / "short", max_steps=7, resume=True, **cosine)
    rates = [r["lr"] for r in records(tmp_path / "short", "train")]
    # by hand: floor 0.1 of the peak; update s > 1 is at progress (s - 1) / 3 of the decay,
    # 0.1 + 0.9 * (1 + cos(pi * progress)) / 2 -> 1, 0.775, 0.325, 0.1; then the floor
    assert rates == pytest.approx([1e-2, 7.75e-3, 3.25e-3, 1e-3, 1e-3, 1e-3, 1e-3])

    # started for 8 (as the whole run) and stopped early by the clock: resumed, it is the
    # whole run, learning rates and weights
    whole, _ = small_run(tmp_path / "whole", max_steps=8, **cosine)
    monkeypatch.setenv("QKV_TEST_DELAY", "0.02")  # each batch takes at least 20 ms
    _, cut = small_run(tmp_path / "cut", max_steps=8, max_minutes=0.002, **cosine)
    assert cut.stop_reason == "max_minutes" and 1 <= cut.steps < 8
    monkeypatch.setenv("QKV_TEST_DELAY", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same length: nothing to warn about
        resumed, result = small_run(tmp_path / "cut", max_steps=8, resume=True, **cosine)
    assert result.steps == 8
    for name, value in parameters(whole).items():
        assert torch.equal(value, parameters(resumed)[name]), name
    assert [r["lr"] for r in records(tmp_path / "cut", "train")] == [
        r["lr"] for r in records(tmp_path / "whole", "train")
    ]
    # a smaller budget than the steps done: nothing more to train, nothing rewritten
    _, result = small_run(tmp_path / "cut", max_steps=5, resume=True, **cosine)
    assert result.steps == 8 and result.stop_reason == "max_steps"


def test_max_minutes_counts_the_time_of_every_session(tmp_path, monkeypatch):
    monkeypatch.setenv("QKV_TEST_DELAY", "0.01")
    _, first = small_run(tmp_path, max_steps=3)
    assert first.elapsed > 0.01
    # a budget shorter than the time already trained: resuming trains no step
    _, again = small_run(tmp_path, max_steps=100, max_minutes=first.elapsed / 120, resume=True)
    assert again.stop_reason == "max_minutes" and again.steps == 3


def test_the_loop_leaves_older_objects_to_the_collector_and_collects_its_own_garbage():
    import gc

    from qkv.training.loop import collect_young_garbage_only

    assert gc.get_freeze_count() == 0
    with collect_young_garbage_only():
        assert gc.get_freeze_count() > 10_000  # the interpreter's and torch's objects
        cycle = []
        cycle.append(cycle)  # garbage made inside the loop: still collected
        del cycle
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0  # everything is back with the collector


def test_a_process_that_froze_objects_itself_is_left_alone(monkeypatch):
    import gc

    from qkv.training import loop

    calls = []
    # the count itself can fall while the block runs (a frozen object freed by another
    # thread), so what is checked is that the loop neither freezes nor unfreezes
    monkeypatch.setattr(loop.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(loop.gc, "unfreeze", lambda: calls.append("unfreeze"))
    monkeypatch.setattr(loop.gc, "get_freeze_count", lambda: 1000)  # a process that froze
    with loop.collect_young_garbage_only():
        pass
    assert calls == []
    monkeypatch.setattr(loop.gc, "get_freeze_count", lambda: 0)  # one that did not
    with loop.collect_young_garbage_only():
        assert calls == ["freeze"]
    assert calls == ["freeze", "unfreeze"]
    assert gc.isenabled()
