"""Crash-safe file operations: a file or directory either appears whole or not at all.

Write to a temporary name, fsync the data, ``os.replace`` onto the final name, fsync the
directory that holds it.  A crash (kill -9, power loss) before the replace leaves the old
file; after it, the new one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["fsync_tree", "fsync_directory", "write_json_atomic", "write_text_atomic", "read_json"]


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
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
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
