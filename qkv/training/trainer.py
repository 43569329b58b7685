"""The shared training loop: every qkv model trains through ``train``.

A model is anything registered with ``qkv.models.register_model`` whose forward is
``model(source, target_input) -> Seq2SeqOutput``.  The objective of one step is

    sum of the step's target-token losses / number of target tokens in the step
    + the mean of the model's ``aux_loss`` over the step's batches (when it gives one),

where "the step" means every batch it accumulates on every process.  Under DDP each rank
scales its summed loss by world_size / global token count, so DDP's gradient average is
exactly the gradient of that objective: N processes with batches b_1..b_N give the same
update as one process with all of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..data.batch import PAD_ID, Batch
from ..models.registry import model_type_of
from .checkpoint import read_pointer
from .config import TrainConfig
from .distributed import all_reduce_sum, broadcast_object, setup_distributed, teardown_distributed
from .loss import sequence_loss
from .optimizer import make_optimizer
from .progress import JsonLog, ProgressBar
from .resume import find_resume_point, restore_run, save_run
from .schedules import build_schedule
from .state import (
    BatchSampler,
    TrainerState,
    TrainingData,
    TrainResult,
    data_fingerprint,
    default_batches,
    restore_rng,
    seed_everything,
    total_steps,
)
from .validation import update_best, validation_loss

__all__ = ["Trainer", "TrainResult", "train"]

Evaluate = Callable[[nn.Module], Mapping[str, float]]


def train(
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
) -> TrainResult:
    """Train ``model`` in place; checkpoints, ``log.jsonl`` and pointers go to ``out_dir``.

    evaluate: called with the bare model (eval mode, no grad) on rank 0 at each validation;
        returns extra metrics to log, e.g. {"bleu": 27.3} (then BLEU picks the best model).
    metadata: JSON-able facts stored in every checkpoint's config.json (data paths, ...).
    tokenizers: name -> object with ``.save(path)``, stored beside the weights.
    resume: continue from ``out_dir/last.json`` exactly where that run stopped.
    train_batches / valid_batches: objects with ``.batches(epoch)`` giving this rank's
        batches; by default a ``TokenBatchSampler`` over the data with ``config.max_tokens``
        (sharded by rank for training; validation batches are split across ranks here).
    """
    trainer = Trainer(
        model,
        train_data,
        valid_data,
        config,
        out_dir,
        evaluate=evaluate,
        metadata=metadata,
        tokenizers=tokenizers,
        resume=resume,
        train_batches=train_batches,
        valid_batches=valid_batches,
    )
    return trainer.run()


class Trainer:
    """One run.  Build it, then call :meth:`run` once."""

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
            raise ValueError(f"patience={config.patience} needs valid_data to validate on")
        self.model_type = model_type_of(model)  # refuses unregistered models early
        self.model, self.config, self.evaluate = model, config, evaluate
        self.train_data, self.valid_data = train_data, valid_data
        self.metadata, self.tokenizers = dict(metadata or {}), dict(tokenizers or {})
        self.out_dir = Path(out_dir)
        self.context = setup_distributed(config.device)
        self.device = self.context.device
        self.resume_from = find_resume_point(self.out_dir, resume=resume, context=self.context)
        self.model.to(self.device)
        self.fingerprint = data_fingerprint(train_data)
        rank, world = self.context.rank, self.context.world_size
        self.train_batches = train_batches or default_batches(train_data, config, rank, world)
        self.valid_batches = valid_batches
        if valid_data is not None and valid_batches is None:
            self.valid_batches = default_batches(valid_data, config, 0, 1, shuffle=False)
        self.updates_per_epoch = math.ceil(len(self.train_batches.batches(0)) / config.accumulate)
        if self.updates_per_epoch == 0:
            raise ValueError("the training data gives no batches; is it empty?")
        self.total_steps = total_steps(config, self.updates_per_epoch)
        self.optimizer = make_optimizer(model, config)
        self.scheduler = build_schedule(
            config.schedule,
            self.optimizer,
            warmup_steps=config.warmup_steps,
            total_steps=self.total_steps,
            floor=config.min_lr / config.lr,
        )
        self.state = TrainerState()
        self.saved_rng: list[dict] | None = None
        if self.resume_from is not None:
            self.state, self.saved_rng = restore_run(
                self.resume_from,
                model=model,
                optimizer=self.optimizer,
                scheduler=self.scheduler,
                config=config,
                fingerprint=self.fingerprint,
                context=self.context,
            )
        self.wrapped: nn.Module = model
        if self.context.is_distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.wrapped = DistributedDataParallel(model, device_ids=device_ids)
        self.autocast = torch.autocast(self.device.type, torch.bfloat16, enabled=config.bf16)

    # ---------------------------------------------------------------- the loop

    def run(self) -> TrainResult:
        config, state, context = self.config, self.state, self.context
        if self.saved_rng is None:
            seed_everything(config.seed + context.rank)  # dropout differs across ranks
        else:
            restore_rng(self.saved_rng[context.rank], self.device)
        self.log = JsonLog(
            self.out_dir / "log.jsonl",
            active=context.is_main,
            resume_step=state.step if self.resume_from is not None else None,
        )
        self.started, self.elapsed_before = time.monotonic(), state.elapsed
        self._reset_window()
        self.last_loss: float | None = None
        self.valid_metrics: dict[str, float] = {}
        bar = ProgressBar(total=self.total_steps, initial=state.step, active=context.is_main)
        self.model.train()
        stop = self._budget_spent()  # a resumed run may have nothing left to do
        try:
            while stop is None:
                stop = self._run_epoch(bar)
            if state.step > state.last_saved_step:
                self._validate_and_save()
        finally:
            bar.close()
        self.log.write(
            "end", step=state.step, epoch=state.epoch, reason=stop, elapsed=self._elapsed()
        )
        result = self._result(stop)
        teardown_distributed(context)
        return result

    def _run_epoch(self, bar: ProgressBar) -> str | None:
        """Train from the current position to the end of the epoch or a stop; the reason."""
        config, state = self.config, self.state
        batches = self.train_batches.batches(state.epoch)
        while state.position < len(batches):
            group = batches[state.position : state.position + config.accumulate]
            out_of_time = config.max_minutes is not None and (
                self._elapsed() >= 60.0 * config.max_minutes
            )
            micro_batches = [self.train_data.collate(indices) for indices in group]
            local_tokens = sum(batch.num_target_tokens for batch in micro_batches)
            # on the CPU (a gloo group under nccl), so the GPU's queue is never waited on
            counts = torch.tensor([local_tokens, float(out_of_time)], dtype=torch.float64)
            global_tokens, ranks_out_of_time = all_reduce_sum(counts, self.context).tolist()
            if ranks_out_of_time > 0:
                return "max_minutes"
            lr = self.scheduler.get_last_lr()[0]
            self._step(micro_batches, global_tokens=max(global_tokens, 1.0))
            state.step += 1
            state.position += len(group)
            epoch_ended = state.position >= len(batches)
            if epoch_ended:
                state.epoch, state.position = state.epoch + 1, 0
            self.window_tokens += global_tokens
            bar.update(1)
            if state.step % config.log_every == 0:
                self._log_window(lr, bar)
            stop = self._budget_spent()
            every = config.validate_every
            if epoch_ended or stop or (every and state.step % every == 0):
                paused = time.monotonic()
                if self._validate_and_save():
                    stop = stop or "early_stopping"
                self.window_start += time.monotonic() - paused  # tokens/s counts training only
            if stop or epoch_ended:
                return stop
        raise ValueError(f"epoch {state.epoch} gives no batches (position {state.position})")

    def _step(self, micro_batches: list[Batch], *, global_tokens: float) -> None:
        """One optimizer update over this rank's micro-batches (adds their summed token
        loss to the log window, without waiting for the device)."""
        scale = self.context.world_size / global_tokens
        for index, batch in enumerate(micro_batches):
            batch = batch.to(self.device)
            last = index == len(micro_batches) - 1
            sync = (
                nullcontext() if last or not self.context.is_distributed else self.wrapped.no_sync()
            )
            with sync:
                with self.autocast:
                    output = self.wrapped(batch.source, batch.target_input)
                token_loss, _ = sequence_loss(
                    output.logits,
                    batch.target_output,
                    pad_id=PAD_ID,
                    label_smoothing=self.config.label_smoothing,
                )
                loss = token_loss * scale
                if output.aux_loss is not None:
                    loss = loss + output.aux_loss.float() / len(micro_batches)
                loss.backward()
            self.window_loss += token_loss.detach()
        if self.config.clip_norm > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _reset_window(self) -> None:
        self.window_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.window_tokens, self.window_start = 0.0, time.monotonic()

    def _window_loss(self) -> float:
        """Mean token loss of the steps since the last log line, over all ranks; refuses to
        go on (and so to checkpoint) once it is not finite.  Every rank calls this."""
        total = all_reduce_sum(self.window_loss.clone(), self.context).item()
        mean = total / max(self.window_tokens, 1.0)
        if not math.isfinite(mean):
            raise FloatingPointError(
                f"the training loss became {mean} by step {self.state.step}; lower lr or set "
                f"clip_norm (the checkpoints in {self.out_dir} were left as they were)"
            )
        self.last_loss = mean
        return mean

    def _log_window(self, lr: float, bar: ProgressBar) -> None:
        loss = self._window_loss()
        tokens_per_second = self.window_tokens / max(time.monotonic() - self.window_start, 1e-9)
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
        self._reset_window()

    # ---------------------------------------------------------------- validation

    def _validate_and_save(self) -> bool:
        """Validate, checkpoint (best too if improved); True when patience has run out."""
        state = self.state
        if self.window_tokens:
            self._window_loss()  # never checkpoint a model whose loss went to nan
        self.valid_metrics = self._validate() if self.valid_data is not None else {}
        improved = bool(self.valid_metrics) and update_best(state, self.valid_metrics)
        if self.valid_metrics:
            self.log.write(
                "valid",
                step=state.step,
                epoch=state.epoch,
                best=improved,
                elapsed=self._elapsed(),
                **self.valid_metrics,
            )
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
        patience = self.config.patience
        return patience is not None and state.bad_validations >= patience

    def _validate(self) -> dict[str, float]:
        """Validation loss (all ranks) and the evaluate callback's metrics (rank 0)."""
        self.model.eval()
        with torch.no_grad():
            with self.autocast:
                metrics = validation_loss(
                    self.model, self.valid_data, self.valid_batches, self.context
                )
            extra = {}
            if self.evaluate is not None and self.context.is_main:
                extra = {key: float(value) for key, value in self.evaluate(self.model).items()}
        metrics.update(broadcast_object(extra, self.context))
        self.model.train()
        return metrics

    # ---------------------------------------------------------------- bookkeeping

    def _budget_spent(self) -> str | None:
        if self.config.max_steps is not None and self.state.step >= self.config.max_steps:
            return "max_steps"
        if self.config.epochs is not None and self.state.epoch >= self.config.epochs:
            return "epochs"
        return None

    def _elapsed(self) -> float:
        return self.elapsed_before + time.monotonic() - self.started

    def _result(self, stop: str) -> TrainResult:
        state = self.state
        return TrainResult(
            steps=state.step,
            epochs=state.epoch,
            stop_reason=stop,
            elapsed=self._elapsed(),
            train_loss=self.last_loss,
            valid=self.valid_metrics,
            best_metric=state.best_metric,
            best_value=state.best_value,
            best_step=state.best_step,
            last_checkpoint=read_pointer(self.out_dir, "last"),
            best_checkpoint=read_pointer(self.out_dir, "best"),
        )
