"""qkv's own errors: the mistakes a user can make, each named where the input is checked.

Every error qkv raises on purpose is a :class:`QkvError`; the ``qkv`` command prints those as
one line (exit 2).  Anything else that escapes is a bug and is shown with its traceback.

``QkvError`` subclasses ``ValueError`` so code written against the earlier plain
``ValueError`` keeps working; ``MissingFileError`` is also a ``FileNotFoundError``.
"""

from __future__ import annotations

__all__ = [
    "QkvError",
    "InputError",
    "DataError",
    "MissingFileError",
    "CheckpointError",
    "MissingDependencyError",
    "RunError",
    "DivergedError",
    "NotFiniteError",
]


class QkvError(ValueError):
    """A problem with what qkv was given; the message names it and the fix.

    ``fields``: the config fields whose values are at fault (the CLI adds the flags that set
    them, so the library never names a flag)."""

    def __init__(self, message: str = "", *, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = tuple(fields)


class InputError(QkvError):
    """Wrong arguments: tensor shapes, dtypes, masks, options, sizes."""


class DataError(QkvError):
    """A corpus, text, image set or tokenizer that cannot be read or makes no sense."""


class MissingFileError(DataError, FileNotFoundError):
    """A file or folder that qkv was pointed at does not exist."""


class CheckpointError(QkvError):
    """A checkpoint that is missing, corrupt, of the wrong kind or asks for absurd sizes."""


class MissingDependencyError(QkvError, ImportError):
    """An optional library a feature needs is not installed; the message says how to install
    it.  Also an ``ImportError``, what a failed import raises."""


class RunError(QkvError):
    """The run folder cannot be used: held by another process, disk full, not writable."""


class DivergedError(RunError, FloatingPointError):
    """The training loss stopped being a finite number (too high a learning rate, no
    gradient clipping); also a ``FloatingPointError``, what it was before it was a QkvError."""


class NotFiniteError(QkvError, FloatingPointError):
    """A model gave scores that are not numbers (NaN or inf) where a result would be picked
    from them -- its weights hold NaN or inf, or its numbers overflow.  Raised instead of a
    result that only looks like one; the ``qkv`` command adds the checkpoint or folder the
    model came from.  Also a ``FloatingPointError``."""
