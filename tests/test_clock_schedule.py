"""A cosine schedule fitted to the clock: its length fixed from the speed of a run's first
steps when the run has a time budget (``qkv.training.clock_fit``)."""

from __future__ import annotations

import json

import pytest
import torch

from qkv.training import TrainConfig, cosine_schedule, read_pointer
from qkv.training.checkpoint import load_trainer_state
from qkv.training.clock_fit import FIRST_TIMED_STEP, MIN_FIT_STEP, ClockFit, on_the_clock
from qkv.training.distributed import DistributedContext
from qkv.training.trainer import Trainer
from tests.train_worker import small_run

ONE_PROCESS = DistributedContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def rates(scheduler, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return out


def sgd() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def test_a_cosine_without_length_holds_its_peak_then_follows_the_length_it_is_given():
    open_ended = cosine_schedule(sgd(), warmup_steps=2, total_steps=None, floor=0.1)
    assert rates(open_ended, 5) == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0])
    open_ended.fit_length(12)  # after 5 updates: the half cosine over updates 6..12
    fixed = cosine_schedule(sgd(), warmup_steps=0, total_steps=7, floor=0.1)
    assert rates(open_ended, 9) == pytest.approx(rates(fixed, 9))
    # fixed at the warm-up's end, it is the cosine that knew its length from the start
    at_warmup = cosine_schedule(sgd(), warmup_steps=2, total_steps=None, floor=0.1)
    head = rates(at_warmup, 2)
    at_warmup.fit_length(12)
    known = cosine_schedule(sgd(), warmup_steps=2, total_steps=12, floor=0.1)
    assert head + rates(at_warmup, 12) == pytest.approx(rates(known, 14))
    with pytest.raises(ValueError, match="fitted already"):
        open_ended.fit_length(20)
    # a schedule that knows a longer length is shortened from the lr it has reached
    longer = cosine_schedule(sgd(), warmup_steps=2, total_steps=100, floor=0.1)
    head = rates(longer, 10)
    assert longer.fit_length(20) == 20
    tail = rates(longer, 12)
    reached = head[-1]
    assert tail[0] < reached and tail[9] == pytest.approx(0.1) and tail[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip([reached, *tail], tail, strict=False))
    shorter = cosine_schedule(sgd(), warmup_steps=2, total_steps=10, floor=0.1)
    assert shorter.fit_length(50) == 10  # a length already shorter is kept


def test_the_length_is_what_the_rest_of_the_clock_allows_at_the_timed_speed():
    config = TrainConfig(schedule="cosine", warmup_steps=100, epochs=None, max_minutes=1.0)
    assert on_the_clock(config)
    fit = ClockFit.of(config, start_step=0, other_budgets=None)
    assert (fit.timed_step, fit.fit_step) == (FIRST_TIMED_STEP, 100)
    lengths = []
    for step in range(1, 101):  # 0.1 s per step, but the first ten took 1 s each
        elapsed = step * 1.0 if step <= 10 else 10.0 + (step - 10) * 0.1
        lengths.append(fit.after_step(step, elapsed, ONE_PROCESS))
    assert lengths[:-1] == [None] * 99
    # after step 100 at 19 s: 41 s left at 10 steps/s
    assert lengths[-1] == 100 + 410
    capped = ClockFit.of(config, start_step=0, other_budgets=300)
    for step in range(1, 101):
        length = capped.after_step(step, step * 0.1, ONE_PROCESS)
    assert length == 300


def test_a_resumed_run_times_its_own_first_steps():
    config = TrainConfig(schedule="cosine", warmup_steps=0, epochs=None, max_minutes=1.0)
    fit = ClockFit.of(config, start_step=500, other_budgets=None)
    assert fit.timed_step == 510 and fit.fit_step == max(MIN_FIT_STEP, 520)


def test_only_schedules_that_can_wait_for_a_length_fit_the_clock():
    assert not on_the_clock(TrainConfig(schedule="inverse_sqrt", max_minutes=1.0))
    assert not on_the_clock(TrainConfig(schedule="cosine", epochs=3))
    TrainConfig(schedule="cosine", epochs=None, max_minutes=1.0)  # a length from the clock
    with pytest.raises(ValueError, match="at least one budget"):
        TrainConfig(schedule="cosine", epochs=None)


def test_a_run_on_the_clock_fixes_its_cosine_ends_at_the_floor_and_resumes_with_it(
    tmp_path, monkeypatch
):
    # the trainer's clock reads 0.1 s per step: the fit is exact whatever the machine's load
    monkeypatch.setattr(Trainer, "_elapsed", lambda self: 0.1 * self.state.step)
    budget = dict(schedule="cosine", warmup_steps=2, lr=1e-2, min_lr=1e-3, log_every=1)
    _, result = small_run(tmp_path, max_minutes=0.1, **budget)  # 6 s: 60 steps
    assert result.stop_reason == "max_minutes" and result.steps == 60
    events = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    (fixed,) = [event for event in events if event["event"] == "schedule"]
    # timed over steps 10..30 (2 s): 10 steps/s, 3 s left after step 30
    assert (fixed["step"], fixed["length"]) == (MIN_FIT_STEP, 60)
    lrs = [event["lr"] for event in events if event["event"] == "train"]
    held = [0.5, 1.0] + [1.0] * (MIN_FIT_STEP - 2)  # the peak until the length is known
    decay = rates(cosine_schedule(sgd(), warmup_steps=0, total_steps=30, floor=0.1), 30)
    assert lrs == pytest.approx([1e-2 * rate for rate in held + decay])
    saved = load_trainer_state(read_pointer(tmp_path, "last"))["state"]["schedule_steps"]
    assert saved == 60
    # resumed with a longer budget, it keeps its length (timing nothing again) and trains
    # the steps past it at the floor
    _, resumed = small_run(tmp_path, max_minutes=0.1, max_steps=63, resume=True, **budget)
    assert resumed.steps == 60  # the clock's budget was spent
    _, resumed = small_run(tmp_path, max_minutes=0.2, max_steps=63, resume=True, **budget)
    assert resumed.steps == 63
    events = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [event["length"] for event in events if event["event"] == "schedule"] == [60]
    last_lrs = [event["lr"] for event in events if event["event"] == "train"][-3:]
    assert last_lrs == pytest.approx([1e-3] * 3)


def test_a_step_budget_longer_than_the_clock_allows_is_shortened_where_the_run_stands(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(Trainer, "_elapsed", lambda self: 0.1 * self.state.step)
    budget = dict(schedule="cosine", warmup_steps=2, lr=1e-2, min_lr=1e-3, log_every=1)
    _, result = small_run(tmp_path, max_minutes=0.1, max_steps=500, **budget)
    assert result.steps == 60
    events = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    (fixed,) = [event for event in events if event["event"] == "schedule"]
    assert (fixed["step"], fixed["length"]) == (MIN_FIT_STEP, 60)
    lrs = [event["lr"] for event in events if event["event"] == "train"]
    known = rates(cosine_schedule(sgd(), warmup_steps=2, total_steps=500, floor=0.1), 30)
    assert lrs[:MIN_FIT_STEP] == pytest.approx([1e-2 * rate for rate in known])
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:], strict=False))  # no jump up
    assert lrs[-1] == pytest.approx(1e-3)
