"""What a training run writes down: its log lines, validations and checkpoints, and the
clock of its training time.  :class:`RunRecords` holds these methods of
:class:`~qkv.training.trainer.Trainer`, which sets the attributes they read (``state``,
``window``, ``log``, ``validation``, ...) in its setup."""

from __future__ import annotations

import time

from .progress import ProgressBar
from .resume import save_run
from .validation import record_validation

__all__ = ["RunRecords"]


class RunRecords:
    """The logging, validation-and-checkpoint and time methods of a ``Trainer``."""

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
