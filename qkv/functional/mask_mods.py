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

__all__ = ["MaskMod", "noop_mask", "and_masks", "or_masks", "ModEvaluator", "index_range"]

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


class ModEvaluator:
    """Evaluates a mask_mod or score_mod on a tile of broadcast index tensors.

    ``fn(*prefix, b, h, q_idx, kv_idx)`` is first called on the index tensors as they are
    (each shaped to broadcast to the tile); a result of the tile's shape -- or, for a mask,
    one that broadcasts to it -- is the elementwise answer.  Indexing chains such as
    ``bias[b][h]`` do not give it (the first index adds dimensions), nor does Python
    control flow; then the call is repeated under ``torch.vmap`` over the tile's flattened
    elements, PyTorch's own semantics.  The first tile decides; later tiles take that road.
    """

    def __init__(self, fn: Callable, kind: str):
        self.fn, self.kind, self.use_vmap = fn, kind, None

    def __call__(self, prefix: tuple[Tensor, ...], index: tuple[Tensor, ...], shape) -> Tensor:
        shape = torch.Size(shape)
        if self.use_vmap is not True:
            try:
                result = self.fn(*prefix, *index)
            except Exception:  # e.g. Python control flow on a tensor: vmap decides below
                result = None
            if self._fits(result, shape):
                self.use_vmap = False
                return self._checked(result)
        return self._vmapped(prefix, index, shape)

    def _vmapped(self, prefix: tuple[Tensor, ...], index: tuple[Tensor, ...], shape) -> Tensor:
        flat = [t.expand(shape).reshape(-1) for t in (*prefix, *index)]
        try:
            result = torch.vmap(self.fn)(*flat)
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
            raise InputError(
                f"{self.kind} must return one value per element (shape () under vmap), got "
                f"{got} per element; it must not change the shape of what it is given"
            )
        self.use_vmap = True
        return self._checked(result.view(shape))

    def _fits(self, result: object, shape: torch.Size) -> bool:
        if not isinstance(result, Tensor) or result.dim() > len(shape):
            return False
        if self.kind == "score_mod":
            return result.shape == shape
        return all(r in (1, s) for r, s in zip(result.shape[::-1], shape[::-1]))

    def _checked(self, result: Tensor) -> Tensor:
        if self.kind == "mask_mod" and result.dtype != torch.bool:
            raise InputError(
                f"mask_mod must return a boolean tensor (True = may attend), got {result.dtype}; "
                "return a comparison such as q_idx >= kv_idx (or use .bool())"
            )
        if self.kind == "score_mod" and not result.is_floating_point():
            raise InputError(f"score_mod must return floating-point scores, got {result.dtype}")
        return result


def index_range(start: int, stop: int, device: torch.device | str) -> Tensor:
    """Indices b, h, q_idx, kv_idx as mods receive them: int32 (as in PyTorch's compiled
    kernels), which halves the memory traffic of evaluating a mask on every element."""
    return torch.arange(start, stop, device=device, dtype=torch.int32)
