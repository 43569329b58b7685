"""What a run shows while it trains: a progress bar on stderr and a JSON-lines log."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .files import write_text_atomic

__all__ = ["JsonLog", "ProgressBar"]


class JsonLog:
    """Appends one JSON object per line to ``path``; inactive (writes nothing) when
    ``active`` is False, as on every rank but 0."""

    def __init__(self, path: Path, *, active: bool = True, resume_step: int | None = None):
        self.path = Path(path)
        self.active = active
        if not active:
            return
        if resume_step is None:
            self.path.write_text("", encoding="utf-8")
        else:
            self._truncate_after(resume_step)

    def write(self, event: str, **fields: Any) -> None:
        if not self.active:
            return
        record = {"event": event, **{k: _jsonable(v) for k, v in fields.items()}}
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
