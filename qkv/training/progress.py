"""What a run shows while it trains: a progress bar on stderr, a JSON-lines log, and the
window of steps that each log line averages over."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..errors import DivergedError
from .distributed import DistributedContext, all_reduce_sum
from .files import disk_errors, write_text_atomic
from .state import TrainerState

__all__ = ["JsonLog", "LossWindow", "ProgressBar"]


class LossWindow:
    """The steps since the last log line: this process's summed token loss (kept on the
    device, so adding to it never waits for the device), every process's target tokens, and
    the seconds spent training (validation excluded).  A resumed run starts from the window
    its checkpoint saved, so its log lines average over the same steps."""

    def __init__(self, device: torch.device, *, loss: float = 0.0, tokens=0.0, seconds=0.0):
        self.loss = torch.tensor(loss, dtype=torch.float64, device=device)
        self.tokens, self._seconds_before, self._started = tokens, seconds, time.monotonic()
        self._paused_at: float | None = None

    @classmethod
    def resumed(cls, state: TrainerState, context: DistributedContext) -> LossWindow:
        """The window a checkpoint saved (its loss is a sum over ranks: rank 0 holds it)."""
        loss = state.window_loss if context.is_main else 0.0
        return cls(
            context.device, loss=loss, tokens=state.window_tokens, seconds=state.window_seconds
        )

    def checked_loss(self, context: DistributedContext, *, step: int) -> tuple[float, float]:
        """The window's summed loss over all ranks and its mean per token; refuses to go on
        (and so to checkpoint) once it is not finite.  Every rank calls this."""
        total = all_reduce_sum(self.loss.clone(), context).item()
        mean = total / max(self.tokens, 1.0)
        if not math.isfinite(mean):
            raise DivergedError(
                f"the training loss became {mean} by step {step}; lower lr or set clip_norm "
                "(the checkpoints written so far were left as they were)",
                fields=("lr", "clip_norm"),
            )
        return total, mean

    def add(self, loss_sum: Tensor, tokens: float) -> None:
        self.loss += loss_sum
        self.tokens += tokens

    @property
    def seconds(self) -> float:
        now = self._paused_at if self._paused_at is not None else time.monotonic()
        return self._seconds_before + now - self._started

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count as training time."""
        self._paused_at = time.monotonic()
        try:
            yield
        finally:
            self._started += time.monotonic() - self._paused_at
            self._paused_at = None

    def reset(self) -> None:
        self.loss.zero_()
        self.tokens, self._seconds_before, self._started = 0.0, 0.0, time.monotonic()


class JsonLog:
    """Appends one JSON object per line to ``path``; inactive (writes nothing) when
    ``active`` is False, as on every rank but 0."""

    def __init__(self, path: Path, *, active: bool = True, resume_step: int | None = None):
        self.path = Path(path)
        self.active = active
        if not active:
            return
        with disk_errors(self.path.parent, what=f"the training log {self.path}"):
            if resume_step is None:
                self.path.write_text("", encoding="utf-8")
            else:
                self._truncate_after(resume_step)

    def write(self, event: str, **fields: Any) -> None:
        if not self.active:
            return
        record = {"event": event, **{k: _jsonable(v) for k, v in fields.items()}}
        with disk_errors(self.path.parent, what=f"the training log {self.path}"):
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    def _truncate_after(self, step: int) -> None:
        """On resume, drop what the interrupted run logged after the checkpoint it resumes:
        those steps are about to be trained again."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by the crash
            if record.get("step", 0) <= step and record.get("event") != "end":
                kept.append(line)
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))


class ProgressBar:
    """A tqdm bar over steps with loss, target tokens/s and ETA.  Shown on stderr when it is
    a terminal (tqdm's ``disable=None``) and on rank 0 only."""

    def __init__(self, *, total: int | None, initial: int, active: bool):
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            file=sys.stderr,
            disable=None if active else True,
            dynamic_ncols=True,
        )

    def update(self, steps: int = 1) -> None:
        self.bar.update(steps)

    def set_total(self, total: int) -> None:
        """The steps the run now plans (a schedule fitted to the clock)."""
        self.bar.total = total
        self.bar.refresh()

    def set_postfix(self, **values: Any) -> None:
        self.bar.set_postfix(values, refresh=False)

    def close(self) -> None:
        self.bar.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if hasattr(value, "item"):
        return _jsonable(value.item())
    return value
