"""One run per folder: a lock that a second training process into the same ``out_dir`` meets.

The lock is ``out_dir/.lock``, held with ``fcntl.flock`` for the life of the run and holding
the owner's pid and host for the error message.  The kernel drops a flock when its process
ends, however it ends (kill -9 included), so a lock file left by a crash is stale by
construction: the next run takes it over.  (flock is advisory and local: two machines
sharing a network folder are not protected.)
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from ..errors import RunError
from .distributed import DistributedContext, broadcast_object

__all__ = ["RunLock", "LOCK_FILE", "lock_run"]

LOCK_FILE = ".lock"


class RunLock:
    """``with RunLock(out_dir):`` or ``acquire()`` / ``release()``; refuses with RunError."""

    def __init__(self, out_dir: str | Path):
        self.path = Path(out_dir) / LOCK_FILE
        self._descriptor: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip() or "?"
            os.close(descriptor)
            raise RunError(
                f"{self.path.parent} is in use by another training run ({owner}); wait for "
                "it to finish, stop it, or choose another out_dir"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._descriptor = descriptor
        return self

    def release(self) -> None:
        """Unlock (the file stays: removing it would race with a process about to lock it)."""
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing drops the flock
            self._descriptor = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_run(out_dir: Path, context: DistributedContext) -> RunLock:
    """Lock ``out_dir`` for a run: rank 0 holds the lock, and every rank raises the same
    RunError when another process holds it."""
    lock = RunLock(out_dir)
    refusal = None
    if context.is_main:
        try:
            lock.acquire()
        except RunError as error:
            refusal = str(error)
    refusal = broadcast_object(refusal, context)
    if refusal is not None:
        raise RunError(refusal)
    return lock
