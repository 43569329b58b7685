"""Stopping on SIGINT / SIGTERM without losing the step: finish it, checkpoint, then stop.

While a run trains, the first SIGINT (Ctrl-C) or SIGTERM (``kill``, a cluster's preemption)
only raises a flag; the loop sees it before the next step, checkpoints, and ``train`` raises
:class:`TrainingInterrupted`.  The handlers are put back at once, so a second signal acts as
usual (SIGINT: KeyboardInterrupt) for whoever cannot wait for the checkpoint; checkpoints
are written whole or not at all, so even that loses no more than the steps since the last one.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from ..errors import RunError

__all__ = ["StopSignals", "TrainingInterrupted"]

CAUGHT = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(RunError):
    """Training stopped on a signal after checkpointing.  A command line exits with
    ``exit_code`` (128 + the signal number: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signal_number: int, *, step: int, checkpoint: Path | None, out_dir: Path):
        self.signal_number, self.step, self.checkpoint = signal_number, step, checkpoint
        self.exit_code = 128 + signal_number
        name = signal.Signals(signal_number).name
        super().__init__(
            f"training stopped by {name} after step {step}; checkpoint {checkpoint}. "
            f"Resume it with resume=True (out_dir={out_dir})",
            fields=("resume",),
        )


class StopSignals:
    """A context that turns SIGINT/SIGTERM into ``self.received`` (the first signal's number).

    Outside the main thread Python cannot install handlers; there it watches nothing.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in CAUGHT:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._restore()

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.received = number
        self._restore()  # a second signal is not deferred

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()
