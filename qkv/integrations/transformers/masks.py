"""The attention mask transformers builds for ``attn_implementation="qkv"``.

transformers describes every mask as a ``mask_function(b, h, q_idx, kv_idx) -> bool`` (True
= may attend, qkv's convention): causal or bidirectional, with a sliding window, packed
documents or image-token overlays folded in, and the 2D padding mask beside it.  Its mask
interface hands that description to a per-implementation function, whose result reaches
every attention layer as ``attention_mask``.  :func:`pattern_mask` keeps the description
instead of deciding the form early: a :class:`PatternMask` is one object that becomes a
dense boolean mask (for PyTorch's fused kernel) or a qkv ``BlockMask`` (for the block-skipping
flex kernel) on first use, and says which of the two the call should run on
(:attr:`PatternMask.sparse`).  The decision is made once per forward pass, by the mask's
block structure, not by model type: plain causal or bidirectional masks with padding stay
dense (PyTorch's kernel already skips the causal half), and a structured pattern -- a
window, packed documents, an overlay -- that leaves at least half of its tiles empty runs
on the tiles it needs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ...functional.block_mask import DEFAULT_BLOCK_SIZE, BlockMask, create_block_mask

__all__ = ["PatternMask", "pattern_mask", "BLOCK_SIZE", "SPARSE_FROM"]

MaskFunction = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]

#: Tile size of the block masks (query rows and keys per tile): qkv's one default.
BLOCK_SIZE = DEFAULT_BLOCK_SIZE
#: A structured pattern runs on the flex kernel when at least this share of its tiles is
#: empty (skipped).  A causal mask empties just under half of them, which PyTorch's fused
#: kernel already skips with ``is_causal``; windows and packed documents empty far more.
SPARSE_FROM = 0.5


@dataclass(eq=False)
class PatternMask:
    """A mask as transformers describes it, turned into the form the kernel needs.

    Shapes: ``shape`` (B, 1, Tq, Tk), as the boolean mask of PyTorch's SDPA;
    ``key_padding`` (B, Tk) bool, True = a real key (None: no padding).

    ``mask_mod(b, h, q_idx, kv_idx)`` is transformers' mask function with the padding and
    the cache offsets folded in, on the raw indices 0..Tq-1, 0..Tk-1 of this call.
    ``structured``: the pattern is more than causal/bidirectional plus padding (a window,
    packed documents, an overlay), so its blocks are worth counting.
    """

    mask_mod: MaskFunction
    shape: tuple[int, int, int, int]
    key_padding: Tensor | None
    structured: bool
    block_size: int
    dense_arguments: dict[str, Any] = field(repr=False)

    @functools.cached_property
    def dense(self) -> Tensor:
        """(B, 1, Tq, Tk) bool, True = may attend: the mask transformers' own
        ``sdpa``/``eager`` implementations apply.

        The mask function is evaluated once on broadcast index tensors, as transformers
        does; one that does not broadcast elementwise goes to transformers' own builder,
        which runs it under vmap."""
        batch, _, tq, tk = self.shape
        device = self.dense_arguments["device"]
        b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
        h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
        q = torch.arange(tq, device=device).view(1, 1, -1, 1)
        kv = torch.arange(tk, device=device).view(1, 1, 1, -1)
        try:
            keep = self.mask_mod(b, h, q, kv)
            broadcasts = torch.broadcast_shapes(keep.shape, self.shape) == self.shape
            if keep.dtype == torch.bool and broadcasts:
                return keep.expand(self.shape)
        except Exception:  # e.g. Python control flow on a tensor: transformers' vmap decides
            pass
        from transformers.masking_utils import sdpa_mask

        return sdpa_mask(**{**self.dense_arguments, "use_vmap": True})

    @functools.cached_property
    def block_mask(self) -> BlockMask:
        """The same pattern as a qkv BlockMask for (B, heads broadcast, Tq, Tk)."""
        batch, _, tq, tk = self.shape
        device = self.dense_arguments["device"]
        return create_block_mask(self.mask_mod, batch, None, tq, tk, device, self.block_size)

    @functools.cached_property
    def sparse(self) -> bool:
        """Whether the block-skipping kernel should run it: a structured pattern leaving at
        least :data:`SPARSE_FROM` of its tiles empty."""
        return self.structured and self.block_mask.sparsity() >= 100.0 * SPARSE_FROM

    def allows(self, batch: Tensor, query: Tensor, key: Tensor) -> Tensor:
        """Whether query ``query[n]`` of row ``batch[n]`` may attend key ``key[n]``.
        Shapes: (N,) index tensors -> (N,) bool."""
        return self.mask_mod(batch, torch.zeros_like(batch), query, key).expand(batch.shape)


def pattern_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int | Tensor = 0,
    kv_offset: int = 0,
    mask_function: MaskFunction | None = None,
    attention_mask: Tensor | None = None,
    local_size: int | None = None,
    allow_is_causal_skip: bool = True,
    allow_is_bidirectional_skip: bool = False,
    use_vmap: bool = False,
    device: torch.device | str = "cpu",
    block_size: int = BLOCK_SIZE,
    **_: Any,
) -> PatternMask | None:
    """transformers' mask interface for "qkv": the arguments of its ``sdpa_mask`` -> None
    where no mask is needed, else a :class:`PatternMask`.

    None (as for SDPA) where the call needs no mask: no padding, no window shorter than the
    keys, and either a plain causal mask with Tq = Tk or Tq = 1 (the attention then takes
    ``is_causal`` from the layer) or a plain bidirectional one.
    """
    from transformers.masking_utils import causal_mask_function

    mask_function = mask_function or causal_mask_function
    padding = _padding(attention_mask, kv_length, kv_offset)
    keys = padding[:, kv_offset : kv_offset + kv_length] if padding is not None else None
    unpadded = keys is None or bool(keys.all())
    window_covers_keys = local_size is None or kv_length < local_size
    if unpadded and window_covers_keys:
        if allow_is_causal_skip and (q_length == 1 or q_length == kv_length):
            return None
        if allow_is_bidirectional_skip and local_size is None:
            return None
    plain = (allow_is_causal_skip or allow_is_bidirectional_skip) and local_size is None
    dense_arguments = dict(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        allow_is_causal_skip=False,
        allow_is_bidirectional_skip=False,
        use_vmap=use_vmap,
        device=device,
    )
    return PatternMask(
        mask_mod=_offset_mask_mod(
            mask_function, None if unpadded else padding, q_offset, kv_offset
        ),
        shape=(batch_size, 1, q_length, kv_length),
        key_padding=None if unpadded else keys,
        structured=not plain,
        block_size=block_size,
        dense_arguments=dense_arguments,
    )


def _padding(attention_mask: Tensor | None, kv_length: int, kv_offset: int) -> Tensor | None:
    """The 2D padding mask as bool (B, at least kv_offset + kv_length); keys past its end
    (an empty static-cache slot) are padding."""
    if attention_mask is None:
        return None
    padding = attention_mask.to(torch.bool)
    missing = kv_offset + kv_length - padding.shape[-1]
    if missing > 0:
        padding = torch.nn.functional.pad(padding, (0, missing), value=False)
    return padding


def _offset_mask_mod(
    mask_function: MaskFunction, padding: Tensor | None, q_offset: int | Tensor, kv_offset: int
) -> MaskFunction:
    """transformers' mask function on this call's raw indices: the cache offsets added, the
    padding of the keys folded in."""

    def transformers_pattern(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        q_abs, kv_abs = q_idx + q_offset, kv_idx + kv_offset
        keep = mask_function(b, h, q_abs, kv_abs)
        if padding is not None:
            keep = keep & padding[b, kv_abs]
        return keep

    return transformers_pattern
