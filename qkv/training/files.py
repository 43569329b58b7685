"""Crash-safe file operations: a file or directory either appears whole or not at all.

Write to a temporary name, fsync the data, ``os.replace`` onto the final name, fsync the
directory that holds it.  A crash (kill -9, power loss) before the replace leaves the old
file; after it, the new one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import RunError

__all__ = [
    "fsync_tree",
    "fsync_directory",
    "write_json_atomic",
    "write_text_atomic",
    "read_json",
    "disk_errors",
]

#: A full disk, a full quota, a read-only filesystem: the place, not the program, is at fault.
DISK_ERRORS = {
    errno.ENOSPC: "is full",
    errno.EDQUOT: "is over its quota",
    errno.EROFS: "is read-only",
}


@contextmanager
def disk_errors(path: Path, *, what: str) -> Iterator[None]:
    """Turn a full, over-quota or read-only disk met while writing ``what`` under ``path``
    into a RunError that names the disk, its free space and the fix."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        try:
            free = f"{shutil.disk_usage(path).free / 2**20:.1f} MiB free"
        except OSError:
            free = "free space unknown"
        raise RunError(
            f"cannot write {what}: the disk holding {path} {DISK_ERRORS[error.errno]} "
            f"({free}); free some space there (or choose another out_dir), then resume"
        ) from error


def fsync_directory(directory: Path) -> None:
    """Make a rename or a new entry in ``directory`` durable (a no-op where unsupported)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root`` and every directory, ``root`` included."""
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_directory(Path(folder))


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)  # a full disk is not made fuller by leftovers
        raise
    os.replace(temporary, path)
    fsync_directory(path.parent)


def write_json_atomic(path: Path, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path: Path, *, what: str = "file") -> Any:
    """Parse a JSON file; a missing or corrupt file is a one-line ValueError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} {path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} {path} is not valid JSON ({error})") from None
