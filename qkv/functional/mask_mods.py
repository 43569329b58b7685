"""Mask mods and score mods: writing them and evaluating them on tiles.

A ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (True = may attend) says which keys each query
may see; :func:`and_masks` / :func:`or_masks` combine them, as PyTorch's FlexAttention
API does.  :class:`ModEvaluator` evaluates a mask_mod or score_mod on a tile of broadcast
index tensors (:func:`index_range`), under ``torch.vmap`` where broadcasting does not give
the elementwise answer.  ``block_mask`` turns a mask_mod into a ``BlockMask``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import InputError
from .captures import CaptureError, TensorReads

__all__ = [
    "MaskMod",
    "noop_mask",
    "and_masks",
    "or_masks",
    "ModEvaluator",
    "ModResultError",
    "index_range",
]

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def noop_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
    """Every query may attend every key."""
    return b.new_ones((), dtype=torch.bool)


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    """A mask_mod allowing a pair only where every one of ``mask_mods`` allows it."""
    _check_callables(mask_mods, "and_masks")

    def and_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        result = b.new_ones((), dtype=torch.bool)
        for mod in mask_mods:
            result = result & mod(b, h, q_idx, kv_idx)
        return result

    return and_mask


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    """A mask_mod allowing a pair where any one of ``mask_mods`` allows it."""
    _check_callables(mask_mods, "or_masks")

    def or_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        result = b.new_zeros((), dtype=torch.bool)
        for mod in mask_mods:
            result = result | mod(b, h, q_idx, kv_idx)
        return result

    return or_mask


def _check_callables(mods: tuple, name: str) -> None:
    for mod in mods:
        if not callable(mod):
            raise InputError(f"{name} takes mask_mod functions, got {type(mod).__name__}")


class ModResultError(InputError, RuntimeError):
    """A mask_mod or score_mod that does not give one value per element (PyTorch raises a
    RuntimeError for the same mistake; this is also qkv's InputError)."""


class ModEvaluator:
    """Evaluates a mask_mod or score_mod on a tile of broadcast index tensors.

    ``fn(*prefix, b, h, q_idx, kv_idx)`` is first called on the index tensors as they are
    (each shaped to broadcast to the tile); a result of the tile's shape -- or, for a mask,
    one that broadcasts to it -- is the elementwise answer.  Indexing chains such as
    ``bias[b][h]`` do not give it (the first index adds dimensions), nor does Python
    control flow; then the call is repeated under ``torch.vmap`` over the tile's flattened
    elements, PyTorch's own semantics.  The first tile decides; later tiles take that road.

    A score_mod's result is the tile's scores: one that broadcasts to the tile (a constant)
    is expanded to it, and one of another dtype (an integer, float64 on float32 scores) is
    cast to the scores' dtype, as PyTorch's kernels store it.  ``watch``: the ids of the
    tensors requiring grad the function is known to read (:mod:`.captures`); with it, every
    call checks that it reads no other.
    """

    def __init__(self, fn: Callable, kind: str):
        self.fn, self.kind, self.use_vmap = fn, kind, None
        self.watch: frozenset[int] | None = None

        self.reads: TensorReads | None = None  # set to record what the function reads

    def _call(self, *args: Tensor) -> Tensor:
        """The function on ``args``, watched (inside vmap too: there its arguments are
        vmap's wrappers of them, which the watch knows for the function's own)."""
        if self.reads is not None:
            self.reads.given(args)
            with self.reads:
                return self.fn(*args)
        if self.watch is None:
            return self.fn(*args)
        with TensorReads(self.fn, self.watch, given=args):
            return self.fn(*args)

    def __call__(self, prefix: tuple[Tensor, ...], index: tuple[Tensor, ...], shape) -> Tensor:
        shape = torch.Size(shape)
        if self.use_vmap is not True:
            try:
                result = self._call(*prefix, *index)
            except CaptureError:
                raise
            except Exception:  # e.g. Python control flow on a tensor: vmap decides below
                result = None
            if self._fits(result, shape):
                self.use_vmap = False
                return self._checked(result, prefix, shape)
        return self._vmapped(prefix, index, shape)

    def _vmapped(self, prefix: tuple[Tensor, ...], index: tuple[Tensor, ...], shape) -> Tensor:
        flat = [t.expand(shape).reshape(-1) for t in (*prefix, *index)]
        try:
            result = torch.vmap(self._call)(*flat)
        except Exception as error:
            if "out of bounds" in str(error) or isinstance(error, IndexError):
                raise InputError(
                    f"{self.kind} indexed a tensor past its end ({error}): a tensor it reads "
                    "(document ids, a bias table, ALiBi slopes) is shorter than the batch, "
                    "heads or sequence it is applied to; make it as long as they are"
                ) from error
            raise InputError(
                f"{self.kind} could not be evaluated elementwise ({error}); it must be written "
                "for one scalar index each, e.g. lambda b, h, q_idx, kv_idx: q_idx >= kv_idx"
            ) from error
        if not isinstance(result, Tensor) or result.shape != flat[0].shape:
            got = tuple(result.shape[1:]) if isinstance(result, Tensor) else type(result).__name__
            raise ModResultError(
                f"{self.kind} must return one value per element (shape () under vmap), got "
                f"{got} per element; it must not change the shape of what it is given"
            )
        self.use_vmap = True
        return self._checked(result.view(shape), prefix, shape)

    def _fits(self, result: object, shape: torch.Size) -> bool:
        if not isinstance(result, Tensor) or result.dim() > len(shape):
            return False
        return all(r in (1, s) for r, s in zip(result.shape[::-1], shape[::-1]))

    def _checked(self, result: Tensor, prefix: tuple[Tensor, ...], shape: torch.Size) -> Tensor:
        if self.kind == "mask_mod":
            if result.dtype != torch.bool:
                raise InputError(
                    f"mask_mod must return a boolean tensor (True = may attend), got "
                    f"{result.dtype}; return a comparison such as q_idx >= kv_idx (or .bool())"
                )
            return result
        if result.is_complex():
            raise InputError(f"score_mod must return real scores, got {result.dtype}")
        if result.shape != shape:  # a constant, or scores independent of some index
            result = result.expand(shape).contiguous()
        return result.to(prefix[0].dtype)


def index_range(start: int, stop: int, device: torch.device | str) -> Tensor:
    """Indices b, h, q_idx, kv_idx as mods receive them: int32 (as in PyTorch's compiled
    kernels), which halves the memory traffic of evaluating a mask on every element."""
    return torch.arange(start, stop, device=device, dtype=torch.int32)
