"""Where a `qkv train ...` run's time goes, and its speed against its own bare step.

``instrumented_run`` calls the CLI in this process with timers around the pieces of a run
(``GENERIC_PHASES`` plus a task's own), each counting its own time only (a collation inside
validation is validation's).  It records a uniform sample of the run's batches, and with
``probe_every`` times the bare step -- qkv's ``TrainStep`` on those batches, already in memory,
with no loop around it: the speed the run would have with data, validation, logging and
checkpoints free -- *during* the run, interleaved with it (a few seconds every so often, on a
copy of the model and the batches sampled so far), the probes' time taken out of the run's
clocks.  This VM's speed drifts by ±7 % between two stretches of a minute, so a bare step
timed only after the run can read another machine speed than the run it is compared with.
"""

from __future__ import annotations

import copy
import functools
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import qkv.training.trainer as trainer_module
import qkv.training.validation as validation_module
from qkv.cli.main import main as qkv_main
from qkv.data.batching import TokenBatchSampler
from qkv.training import TrainConfig
from qkv.training.optimizer import MuonAdamW
from qkv.training.progress import ProgressBar
from qkv.training.step import TrainStep

#: (phase, owner, attribute): what each timer wraps, for every family.
GENERIC_PHASES = [
    ("trainer setup (sampler, optimizer, resume)", trainer_module.Trainer, "_prepare"),
    ("data: batching", TokenBatchSampler, "batches"),
    ("loop: collation, bookkeeping", trainer_module.Trainer, "_run_epoch"),
    ("step", TrainStep, "__call__"),
    ("logging, progress", trainer_module.Trainer, "_log_window"),
    ("logging, progress", ProgressBar, "update"),
    ("validation: loss", validation_module, "validation_loss"),
    ("validation: evaluate callback", validation_module, "validate"),
    ("checkpoints", trainer_module.Trainer, "_save"),
]
RECORDED_GROUPS = 32  # the step groups the bare step replays, drawn over the whole run
PREPARE = GENERIC_PHASES[0][0]


def clock_seconds(run: dict[str, Any]) -> float:
    """The seconds on the trainer's clock (what ``--max-minutes`` counts): the trainer's,
    less its setup (whose first AdamW imports torch._dynamo: seconds, once per process)."""
    return run["trainer_seconds"] - run["phases"].seconds[PREPARE]


class Phases:
    """Exclusive wall time per phase: a timed call inside another counts for itself only."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._nested: list[float] = []

    def wrap(self, phase: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            self._nested.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                total = time.perf_counter() - start
                self.seconds[phase] += total - self._nested.pop()
                self.calls[phase] += 1
                if self._nested:
                    self._nested[-1] += total

        return timed

    def exclude(self, seconds: float) -> None:
        """Take ``seconds`` spent inside the innermost running phase out of it (a probe)."""
        if self._nested:
            self._nested[-1] += seconds


@contextmanager
def patched(replacements: list[tuple[object, str, Callable]]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in replacements]
    try:
        for owner, name, new in replacements:
            setattr(owner, name, new)
        yield
    finally:
        for owner, name, old in reversed(saved):
            setattr(owner, name, old)


def instrumented_run(
    argv: list[str],
    phases_of_task: list[tuple[str, object, str]],
    *,
    marks: list[float] = (),
    probe_every: float | None = None,
    probe_seconds: float = 3.0,
) -> dict[str, Any]:
    """Run ``qkv *argv`` in this process with the phases timed.  Returns the model, its step
    (``train_step``), a sample of its groups of batches, the counts (steps, target tokens, items:
    examples), the wall seconds (``trainer_seconds``: of the trainer alone), the Phases, and
    the weights at each minute mark of the trainer's clock (from the end of its setup, as
    ``--max-minutes`` counts; a mark after the end: the final weights).

    ``probe_every`` seconds of the run (after a step), the bare step runs for
    ``probe_seconds`` (:class:`BareProbe`, ``probe`` in the result: its totals and rates), and every clock above -- the wall seconds, the trainer's and its
    ``--max-minutes`` budget, the minute marks -- leaves their time out."""
    phases, seen = Phases(), {"tokens": 0, "steps": 0, "items": 0, "groups": []}
    probe = BareProbe(TrainStep.__call__) if probe_every else None  # the step unpatched
    next_probe = [time.perf_counter() + (probe_every or 0.0)]
    snapshots: dict[float, dict[str, torch.Tensor]] = {}
    timed = {(o, n): phases.wrap(p, getattr(o, n)) for p, o, n in GENERIC_PHASES + phases_of_task}
    timed_step = timed[(TrainStep, "__call__")]
    pending = sorted(marks)
    draws = random.Random(0)
    start = time.perf_counter()

    def step(self: TrainStep, micro_batches: list, *, global_tokens: float) -> torch.Tensor:
        loss = timed_step(self, micro_batches, global_tokens=global_tokens)
        seen["train_step"] = self
        keep_in_sample(seen["groups"], (micro_batches, global_tokens), seen["steps"], draws)
        seen["tokens"] += int(global_tokens)
        seen["items"] += sum(len(batch.index) for batch in micro_batches)
        seen["steps"] += 1
        if probe is not None and time.perf_counter() >= next_probe[0]:
            spent = probe.run(self, seen["groups"], probe_seconds)
            phases.exclude(spent)  # out of the loop's phase, and out of every clock:
            seen["trainer"].started += spent
            seen["clock_start"] += spent
            next_probe[0] = time.perf_counter() + probe_every
        while pending and time.perf_counter() - seen["clock_start"] >= 60 * pending[0]:
            snapshots[pending.pop(0)] = weights_of(self.model)
        return loss

    timed[(TrainStep, "__call__")] = step
    timed_prepare = timed[(trainer_module.Trainer, "_prepare")]

    def prepare(self: trainer_module.Trainer) -> None:
        timed_prepare(self)
        seen["clock_start"] = time.perf_counter()  # where the trainer's clock starts
        seen["trainer"] = self

    timed[(trainer_module.Trainer, "_prepare")] = prepare
    trainer_run = trainer_module.Trainer.run

    def run(self: trainer_module.Trainer) -> Any:
        began = time.perf_counter()
        try:
            return trainer_run(self)
        finally:
            seen["trainer_seconds"] = time.perf_counter() - began

    timed[(trainer_module.Trainer, "run")] = run
    with patched([(owner, name, fn) for (owner, name), fn in timed.items()]):
        qkv_main(argv)
    probed = probe.totals["seconds"] if probe is not None else 0.0
    seconds = time.perf_counter() - start - probed
    seen["trainer_seconds"] -= probed
    for mark in pending:
        snapshots[mark] = weights_of(seen["train_step"].model)
    seen.pop("trainer", None)
    return dict(
        seen,
        model=seen["train_step"].model,
        seconds=seconds,
        phases=phases,
        snapshots=snapshots,
        probe=probe,
    )


class BareProbe:
    """The bare step timed in short stretches during a run: a TrainStep over a copy of the
    run's model (copied at the first probe) and a fresh optimizer with its settings, on the
    run's batches sampled so far, already in memory."""

    def __init__(self, call: Callable) -> None:
        self.call, self.step = call, None
        self.totals = {"tokens": 0.0, "items": 0, "steps": 0, "seconds": 0.0, "seconds_timed": 0.0}

    def run(self, ran: TrainStep, groups: list, seconds: float) -> float:
        """Time the bare step for about ``seconds``; returns the wall time spent (the copy
        and warm-up included: all of it is taken out of the run's clocks)."""
        began = time.perf_counter()
        if self.step is None:
            self.step = bare_step(ran)
            self.call(self.step, *groups[0][:1], global_tokens=groups[0][1])  # warm-up
        rng = torch.get_rng_state()  # the run's dropout stream stays the run's
        start, steps = time.perf_counter(), 0
        while steps < 2 or time.perf_counter() - start < seconds:
            micro_batches, global_tokens = groups[(self.totals["steps"] + steps) % len(groups)]
            self.call(self.step, micro_batches, global_tokens=global_tokens)
            self.totals["tokens"] += global_tokens
            self.totals["items"] += sum(len(batch.index) for batch in micro_batches)
            steps += 1
        self.totals["seconds_timed"] += time.perf_counter() - start
        self.totals["steps"] += steps
        torch.set_rng_state(rng)
        spent = time.perf_counter() - began
        self.totals["seconds"] += spent
        return spent

    def rates(self) -> tuple[float, float]:
        """Target tokens/s and items/s over every probe's timed stretch."""
        timed = self.totals["seconds_timed"]
        return self.totals["tokens"] / timed, self.totals["items"] / timed


def keep_in_sample(sample: list, item: Any, seen: int, draws: random.Random) -> None:
    """Reservoir sampling: after ``seen + 1`` items, ``sample`` holds ``RECORDED_GROUPS`` of
    them drawn uniformly (the batches of a whole run, not its first ones: with batches of
    many shapes, the first few are not the run's mix)."""
    if len(sample) < RECORDED_GROUPS:
        sample.append(item)
        return
    slot = draws.randrange(seen + 1)
    if slot < RECORDED_GROUPS:
        sample[slot] = item


def weights_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def bare_step(ran: TrainStep) -> TrainStep:
    """A TrainStep like ``ran``'s over a copy of its model and a fresh optimizer with its
    settings (weight decay and betas included, so an update costs what the run's did)."""
    model = copy.deepcopy(ran.model)
    model.train()
    config = TrainConfig(label_smoothing=ran.label_smoothing, clip_norm=ran.clip_norm, lr=1e-4)
    optimizer = same_optimizer(ran.optimizer, ran.model, model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return TrainStep(model, model, optimizer, scheduler, config, ran.context)


def same_optimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, copied: nn.Module
) -> torch.optim.Optimizer:
    """A fresh optimizer of ``optimizer``'s class and groups (each group's settings: lr,
    weight decay, betas) over ``copied``'s parameters, ``copied`` being a deep copy of
    ``model``."""
    twin = dict(zip(map(id, model.parameters()), copied.parameters(), strict=True))

    def groups_of(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
        return [
            {
                **{k: v for k, v in group.items() if k != "params"},
                "params": [twin[id(p)] for p in group["params"]],
            }
            for group in optimizer.param_groups
        ]

    if isinstance(optimizer, MuonAdamW):  # its two optimizers, each with its own groups
        muon = optimizer.muon.param_groups[0]
        adamw = optimizer.adamw.param_groups[0]
        hidden = [p for group in groups_of(optimizer.muon) for p in group["params"]]
        return MuonAdamW(
            hidden,
            groups_of(optimizer.adamw),
            lr=muon["lr"],
            betas=adamw["betas"],
            weight_decay=muon["weight_decay"],
            momentum=muon["momentum"],
        )
    return type(optimizer)(groups_of(optimizer))


def breakdown_rows(run: dict[str, Any]) -> list[list[object]]:
    """Phase, calls, seconds and share of the run's wall time; then the rest and the total."""
    phases: Phases = run["phases"]
    total = run["seconds"]
    rows = [[p, phases.calls[p], s, s / total] for p, s in phases.seconds.items()]
    other = total - sum(phases.seconds.values())
    rows.append(["the rest (the task's data, tokenizer, model)", "—", other, other / total])
    rows.append(["the whole run", 1, total, 1.0])
    return rows
