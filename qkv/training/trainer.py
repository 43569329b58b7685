"""The shared training loop: every qkv model trains through ``train``.

A model is anything registered with ``qkv.models.register_model`` whose forward is
``model(source, target_input) -> Seq2SeqOutput``.  What one step does (the objective, its
normalisation over accumulated batches and processes) is ``TrainStep``'s business
(``step.py``); when the loop stops, logs and validates is decided by the small functions of
``loop.py``.  This module strings them together, writes what a run records (its log lines,
validations and checkpoints, and the clock of its training time: methods that read most of
the run's state, so they live on the one class that holds it), and keeps the run's files
safe: one run per
``out_dir`` (a lock), a checkpoint before stopping on SIGINT/SIGTERM, and a RunError naming
the disk when it fills up.

A resumed run may change its budgets; the schedule keeps its first length
(``resume.schedule_length``) and ``max_minutes`` counts all its sessions' training time.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..errors import DataError, InputError
from ..models.registry import model_type_of
from .checkpoint import read_pointer
from .clock_fit import ClockFit, on_the_clock
from .config import TrainConfig
from .context_parallel import check_context_parallel_model, plan_context_parallel
from .distributed import peer_lost, setup_distributed, teardown_distributed
from .lock import lock_run
from .loop import (
    agree_before_step,
    budget_spent,
    collect_young_garbage_only,
    log_now,
    step_groups,
    validate_now,
)
from .progress import JsonLog, LossWindow, ProgressBar
from .resume import save_run, start_or_resume
from .schedules import schedule_kind
from .signals import StopSignals, TrainingInterrupted
from .state import (
    BatchSampler,
    TrainingData,
    TrainResult,
    data_fingerprint,
    default_batches,
    total_steps,
)
from .step import TrainStep
from .validation import Validation, record_validation

__all__ = ["Trainer", "TrainResult", "TrainingInterrupted", "train"]

Evaluate = Callable[[nn.Module], Mapping[str, float]]


def train(*args: Any, **kwargs: Any) -> TrainResult:
    """``Trainer(*args, **kwargs).run()``: train a model in place (arguments: ``Trainer``)."""
    return Trainer(*args, **kwargs).run()


class Trainer:
    """One run: build it, then call :meth:`run` once.

    model: trained in place; checkpoints, ``log.jsonl`` and pointers go to ``out_dir``.
    evaluate: called with the bare model (eval mode, no grad) on rank 0 at each validation;
        returns extra metrics to log, e.g. {"bleu": 27.3} (then BLEU picks the best model).
    metadata: JSON-able facts stored in every checkpoint's config.json (data paths, ...).
    tokenizers: name -> object with ``.save(path)``, stored beside the weights.
    resume: continue from ``out_dir/last.json`` exactly where that run stopped.
    train_batches / valid_batches: objects with ``.batches(epoch)`` giving this rank's
        batches; by default a ``TokenBatchSampler`` over the data with ``config.max_tokens``
        (sharded by rank for training; validation batches are split across ranks here).

    ``run`` raises RunError when another process trains into ``out_dir`` or its disk fills
    up, and TrainingInterrupted (after checkpointing) on SIGINT or SIGTERM.
    """

    def __init__(
        self,
        model: nn.Module,
        train_data: TrainingData,
        valid_data: TrainingData | None,
        config: TrainConfig,
        out_dir: str | Path,
        *,
        evaluate: Evaluate | None = None,
        metadata: Mapping[str, Any] | None = None,
        tokenizers: Mapping[str, Any] | None = None,
        resume: bool = False,
        train_batches: BatchSampler | None = None,
        valid_batches: BatchSampler | None = None,
    ):
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        for name, data in (("train_data", train_data), ("valid_data", valid_data)):
            if data is not None and not isinstance(data, TrainingData):
                raise TypeError(f"{name} needs len(), source_lengths, target_lengths, collate()")
        if valid_data is None and config.patience is not None:
            raise InputError(f"patience={config.patience} needs valid_data to validate on")
        if valid_data is None and schedule_kind(config.schedule).needs_validation:
            raise InputError(
                f"schedule={config.schedule!r} needs valid_data: it listens to the validation loss"
            )
        self.model_type = model_type_of(model)  # refuses unregistered models early
        self.model, self.config, self.evaluate = model, config, evaluate
        self.train_data, self.valid_data = train_data, valid_data
        self.metadata, self.tokenizers = dict(metadata or {}), dict(tokenizers or {})
        self.out_dir, self.resume = Path(out_dir), resume
        self.train_batches, self.valid_batches = train_batches, valid_batches

    def run(self) -> TrainResult:
        """Train until a budget is spent, patience runs out or a signal arrives."""
        self.context = setup_distributed(self.config.device)
        try:
            result = self._run_locked()
        except BaseException:
            # the other ranks may never reach a barrier: leave the group without waiting
            teardown_distributed(self.context, wait_for_peers=False)
            raise
        teardown_distributed(self.context)
        return result

    def _run_locked(self) -> TrainResult:
        lock = lock_run(self.out_dir, self.context)
        try:
            self._prepare()
            with StopSignals() as signals:
                try:
                    stop = self._train(signals)
                except RuntimeError as error:  # a process died: one line, not a traceback
                    raise peer_lost(error, self.context) from None
            return self._finish(stop, signals)
        finally:
            lock.release()

    # ---------------------------------------------------------------- setup

    def _prepare(self) -> None:
        config, context = self.config, self.context
        self.device = context.device
        self.model.to(self.device)
        self.fingerprint = data_fingerprint(self.train_data)
        check_context_parallel_model(self.model, config.context_parallel)
        self.parallel = plan_context_parallel(config.context_parallel, context)
        rank, world = self.parallel.data_rank, self.parallel.data_world  # a group shares batches
        if self.train_batches is None:
            self.train_batches = default_batches(self.train_data, config, rank, world)
        if self.valid_data is not None and self.valid_batches is None:
            self.valid_batches = default_batches(self.valid_data, config, 0, 1, shuffle=False)
        updates_per_epoch = math.ceil(len(self.train_batches.batches(0)) / config.accumulate)
        if updates_per_epoch == 0:
            raise DataError("the training data gives no batches; is it empty?")
        self.total_steps = total_steps(config, updates_per_epoch)
        self.state, self.optimizer, self.scheduler, resumed = start_or_resume(
            self.model,
            config,
            out_dir=self.out_dir,
            resume=self.resume,
            total_steps=self.total_steps,
            fingerprint=self.fingerprint,
            context=context,
        )
        step_module = self.parallel.wrap(self.model)
        self.wrapped: nn.Module = step_module
        if context.is_distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = DistributedDataParallel(step_module, device_ids=device_ids)
        self.train_step = TrainStep(
            self.model, self.wrapped, self.optimizer, self.scheduler, config, context,
            shard=getattr(step_module, "shard", None),
        )  # fmt: skip
        self.validation = None
        if self.valid_data is not None:
            self.validation = Validation(
                self.valid_data,
                self.valid_batches,
                context,
                sample=config.eval_batches,
                evaluate=self.evaluate,
                autocast=self.train_step.autocast,
            )
        self.log = JsonLog(
            self.out_dir / "log.jsonl",
            active=context.is_main,
            resume_step=self.state.step if resumed else None,
        )
        self.clock_fit = None  # a schedule whose length the run's first steps fit
        if on_the_clock(config) and not self.scheduler.multiplier.fitted:
            self.clock_fit = ClockFit.of(
                config, start_step=self.state.step, other_budgets=self.total_steps
            )
        self.window = LossWindow.resumed(self.state, context)
        self.started, self.elapsed_before = time.monotonic(), self.state.elapsed
        self.last_loss: float | None = None
        self.valid_metrics: dict[str, float] = {}

    # ---------------------------------------------------------------- the loop

    def _train(self, signals: StopSignals) -> str:
        """Train epoch after epoch; the reason it stopped."""
        bar = ProgressBar(
            total=self.total_steps, initial=self.state.step, active=self.context.is_main
        )
        self.model.train()
        stop = budget_spent(self.state, self.config)  # a resumed run may have nothing to do
        try:
            with collect_young_garbage_only():
                while stop is None:
                    stop = self._run_epoch(bar, signals)
        finally:
            bar.close()
        return stop

    def _run_epoch(self, bar: ProgressBar, signals: StopSignals) -> str | None:
        """Train from the current position to the end of the epoch or a stop; the reason."""
        config, state = self.config, self.state
        batches = self.train_batches.batches(state.epoch)
        for group in step_groups(batches, position=state.position, accumulate=config.accumulate):
            micro_batches = [self.train_data.collate(indices) for indices in group]
            agreed = agree_before_step(  # the P ranks of a context-parallel group share a window
                sum(batch.num_target_tokens for batch in micro_batches) / self.parallel.size,
                out_of_time=self._out_of_time(),
                interrupted=signals.received is not None,
                context=self.context,
            )
            if agreed.stop:
                return agreed.stop
            lr = self.scheduler.get_last_lr()[0]
            loss_sum = self.train_step(micro_batches, global_tokens=max(agreed.global_tokens, 1.0))
            self.window.add(loss_sum, agreed.global_tokens)
            state.step, state.position = state.step + 1, state.position + len(group)
            epoch_ended = state.position >= len(batches)
            if epoch_ended:
                state.epoch, state.position = state.epoch + 1, 0
            bar.update(1)
            if self.clock_fit is not None:
                self._fit_schedule_to_clock(bar)
            if log_now(state.step, log_every=config.log_every):
                self._log_window(lr, bar)
            stop = budget_spent(state, config)
            every = config.validate_every
            if validate_now(
                state.step, epoch_ended=epoch_ended, stopping=bool(stop), validate_every=every
            ):
                with self.window.paused():  # tokens/s counts training only
                    if self._validate_and_save(last=bool(stop)):
                        stop = stop or "early_stopping"
            if stop or epoch_ended:
                return stop
        raise ValueError(f"epoch {state.epoch} gives no batches (position {state.position})")

    def _fit_schedule_to_clock(self, bar: ProgressBar) -> None:
        length = self.clock_fit.after_step(self.state.step, self._elapsed(), self.context)
        if length is None:
            return
        self.clock_fit = None
        length = self.scheduler.fit_length(length)
        self.state.schedule_steps = length
        bar.set_total(length)
        self.log.write("schedule", step=self.state.step, length=length, elapsed=self._elapsed())

    def _finish(self, stop: str, signals: StopSignals) -> TrainResult:
        state = self.state
        if state.step > state.last_saved_step:
            if stop == "interrupted":
                self._save(improved=False)  # no validation: a preempted job has seconds
            else:
                self._validate_and_save(last=True)
        elif stop == "early_stopping" and self.validation is not None:
            full = self.validation.full_text(self.model)  # its last validation scored a sample
            self.valid_metrics.update(full)
            if full:
                self.log.write("valid_full", step=state.step, elapsed=self._elapsed(), **full)
        self.log.write(
            "end", step=state.step, epoch=state.epoch, reason=stop, elapsed=self._elapsed()
        )
        if stop == "interrupted":
            raise TrainingInterrupted(
                signals.received or signal.SIGTERM,  # another rank received it
                step=state.step,
                checkpoint=read_pointer(self.out_dir, "last"),
                out_dir=self.out_dir,
            )
        return TrainResult.of(
            state, stop, self._elapsed(), self.last_loss, self.valid_metrics, self.out_dir
        )

    # ---------------------------------------------------------------- logging

    def _window_loss(self) -> tuple[float, float]:
        """The window's loss summed over ranks, and its mean (every rank calls this)."""
        total, mean = self.window.checked_loss(self.context, step=self.state.step)
        self.last_loss = mean
        return total, mean

    def _log_window(self, lr: float, bar: ProgressBar) -> None:
        _, loss = self._window_loss()
        tokens_per_second = self.window.tokens / max(self.window.seconds, 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_second:.0f}")
        self.log.write(
            "train",
            step=self.state.step,
            epoch=self.state.epoch,
            loss=loss,
            lr=lr,
            tokens_per_second=tokens_per_second,
            elapsed=self._elapsed(),
        )
        self.window.reset()

    # ---------------------------------------------------------------- validation, checkpoints

    def _validate_and_save(self, *, last: bool = False) -> bool:
        """Validate, checkpoint (best too if improved); True when patience has run out.
        The ``last`` validation of a run also scores all the validation data."""
        state = self.state
        self.valid_metrics = {}
        if self.validation is not None:
            self.valid_metrics = self.validation(self.model, last=last)
        improved = record_validation(state, self.valid_metrics, self.scheduler)
        if self.valid_metrics:
            self.log.write(
                "valid",
                step=state.step,
                epoch=state.epoch,
                best=improved,
                lr=self.scheduler.get_last_lr()[0],  # of the next step (a plateau lowers it)
                elapsed=self._elapsed(),
                **self.valid_metrics,
            )
        self._save(improved=improved)
        patience = self.config.patience
        return patience is not None and state.bad_validations >= patience

    def _save(self, *, improved: bool) -> None:
        state = self.state
        # never checkpoint a model whose loss went to nan; the window resumes where it is
        state.window_loss = self._window_loss()[0] if self.window.tokens else 0.0
        state.window_tokens, state.window_seconds = self.window.tokens, self.window.seconds
        state.last_saved_step, state.elapsed = state.step, self._elapsed()
        save_run(
            self.out_dir,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            config=self.config,
            fingerprint=self.fingerprint,
            state=state,
            context=self.context,
            metadata=self.metadata,
            tokenizers=self.tokenizers,
            improved=improved,
        )

    # ---------------------------------------------------------------- time

    def _out_of_time(self) -> bool:
        return (
            self.config.max_minutes is not None and self._elapsed() >= 60 * self.config.max_minutes
        )

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started
