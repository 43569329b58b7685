"""Which tensors requiring grad a score_mod reads: found by watching it run, as PyTorch does.

PyTorch's FlexAttention traces a ``score_mod`` with Dynamo, and every tensor the trace
reads from outside -- whatever path led to it: a closure cell, an attribute of any object, a
dict, a module's parameter, a global -- becomes an input of the attention's autograd node,
so it gets its gradient.  qkv watches the function run instead: under a
``TorchFunctionMode`` every torch call the function makes is seen with its arguments, and a
tensor requiring grad that the call did not make itself was read from outside.  Walking the
function's closure and globals by name cannot find a table behind ``config.table`` (and
finds a global that merely shares the attribute's name); watching finds exactly the tensors
the arithmetic touches.

A function whose reads depend on the data (a Python ``if`` choosing a table) may read on a
later tile a tensor the first look did not see; the kernel watches every tile it computes and
raises :class:`CaptureError` then, naming the function, rather than let that tensor go
without a gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..errors import InputError

__all__ = ["CaptureError", "TensorReads", "captured_tensors", "describe_function"]


class CaptureError(InputError, RuntimeError):
    """A tensor requiring grad that a score_mod reads, which qkv cannot give its gradient."""


def _is_wrapped(t: Tensor) -> bool:
    """A vmap/grad wrapper of one of the function's own (batched) inputs."""
    return torch._C._functorch.is_functorch_wrapped_tensor(t)


class TensorReads(TorchFunctionMode):
    """Records, for the code run under it, the tensors requiring grad it reads from
    outside: arguments of a torch call that are neither ``given`` (the function's own
    inputs) nor returned by an earlier call under it.

    ``found`` maps id -> tensor in the order first read.  ``expected``: ids already known
    (with it, an unexpected read raises :class:`CaptureError` at once)."""

    def __init__(
        self, fn: Callable, expected: frozenset[int] | None = None, given: tuple[Tensor, ...] = ()
    ):
        super().__init__()
        self.fn, self.expected = fn, expected
        self.found: dict[int, Tensor] = {}
        self._made = {id(t): t for t in given}  # kept alive so their ids are not reused

    def given(self, tensors: tuple[Tensor, ...]) -> None:
        """Mark ``tensors`` as the function's own inputs."""
        self._made.update((id(t), t) for t in tensors)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _tensors(args) if not kwargs else tree_flatten((args, kwargs))[0]:
            if (
                isinstance(t, Tensor)
                and t.requires_grad
                and id(t) not in self._made
                and not _is_wrapped(t)
            ):
                self._read(t)
        result = func(*args, **kwargs)
        if isinstance(result, Tensor):
            self._made[id(result)] = result
        else:
            self._made.update((id(t), t) for t in tree_flatten(result)[0] if isinstance(t, Tensor))
        return result

    def _read(self, t: Tensor) -> None:
        if self.expected is not None and id(t) not in self.expected:
            raise CaptureError(
                f"{describe_function(self.fn)} read a tensor requiring grad, "
                f"{t.dtype} {tuple(t.shape)}, on a tile where it had not read it before "
                "(its reads depend on the indices or the data); qkv cannot give that tensor "
                "its gradient. Read every learned tensor on every element (e.g. torch.where "
                "over both tables instead of a Python if)"
            )
        self.found.setdefault(id(t), t)


def _tensors(args: tuple) -> list:
    """The arguments, with those in a list or tuple (``torch.cat([a, b])``) spread out:
    cheaper than a full pytree walk on the common calls."""
    found = []
    for a in args:
        if isinstance(a, (list, tuple)):
            found.extend(tree_flatten(a)[0])
        else:
            found.append(a)
    return found


def captured_tensors(fn: Callable, *args: Tensor) -> list[Tensor]:
    """The tensors requiring grad that ``fn`` reads from outside when called on ``args``:
    every one of them, however ``fn`` reaches it."""
    watch = TensorReads(fn, given=args)
    with watch:
        fn(*args)
    return list(watch.found.values())


def describe_function(fn: Callable) -> str:
    """'score_mod bias_mod (file.py:12)': the name and place a user recognises."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code else ""
    return f"score_mod {name}{where}"
