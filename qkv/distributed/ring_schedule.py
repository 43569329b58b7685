"""The schedule of :mod:`.ring`: what its passes share (:class:`_Ring`), and which pieces of
a rank's query chunks and of the key chunks it holds at a ring step meet -- in full, on
their causal diagonal, under the block mask's and the score bias's tile, or not at all.

Work is cut into pieces of at most one kernel block (``block_size`` tokens) of queries and
of keys: every tensor made per call (the kernel's copies of its inputs, a mask or bias
tile) is then one block's size, whatever the chunk length, so a rank's memory is its
slices plus O(block) -- and pieces that a mask blocks entirely are skipped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from qkv.errors import InputError
from qkv.functional.mask_mods import ModEvaluator, index_range

from .layout import SequenceLayout


class _Ring(NamedTuple):
    """What forward and backward share besides tensors."""

    layout: SequenceLayout
    group: Any
    next_peer: int  # global ranks, as the point-to-point ops want them
    prev_peer: int
    causal: bool
    mask_mod: ModEvaluator | None
    score_bias: ModEvaluator | None  # an additive score_mod, evaluated at score 0
    scale: float
    block_size: int


def _pairs(ring: _Ring, step: int, query: Tensor):
    """(query rows, key cols, mask or None, causal diagonal) for each piece of a local query
    chunk and of a chunk of the keys held at ``step`` (those of rank r - step) that has any
    allowed score; ``mask`` is None, boolean (True = may attend) or a float score bias."""
    layout = ring.layout
    source = (layout.rank - step) % layout.world_size
    size, piece = layout.chunk_len, ring.block_size
    for qi, q_chunk in enumerate(layout.chunks):
        for ki, k_chunk in enumerate(layout.chunks_of(source)):
            if ring.causal and k_chunk > q_chunk:
                continue  # entirely in the future
            same_chunk = ring.causal and k_chunk == q_chunk
            for q0 in range(0, size, piece):
                for k0 in range(0, size, piece):
                    if same_chunk and k0 > q0:
                        continue  # this piece of the chunk is in the future
                    diagonal = same_chunk and k0 == q0  # square: same cut of the same chunk
                    rows = slice(qi * size + q0, qi * size + min(q0 + piece, size))
                    cols = slice(ki * size + k0, ki * size + min(k0 + piece, size))
                    starts = (q_chunk * size + q0, k_chunk * size + k0)
                    mask = _tile_mask(ring, query, starts, rows, cols, diagonal)
                    if mask is not False:
                        yield rows, cols, mask, diagonal


def _tile_mask(ring: _Ring, query: Tensor, starts, rows: slice, cols: slice, diagonal: bool):
    """The block mask and score bias of one piece at global positions ``starts``: None (no
    mask), a bool tile, a float bias tile (-inf where blocked), or False when it blocks
    every score of the piece."""
    if ring.mask_mod is None and ring.score_bias is None:
        return None
    (batch, heads), device = query.shape[:2], query.device
    q_len, k_len = rows.stop - rows.start, cols.stop - cols.start
    shape = (batch, heads, q_len, k_len)
    index = (
        index_range(0, batch, device).view(-1, 1, 1, 1),
        index_range(0, heads, device).view(1, -1, 1, 1),
        index_range(starts[0], starts[0] + q_len, device).view(1, 1, -1, 1),
        index_range(starts[1], starts[1] + k_len, device).view(1, 1, 1, -1),
    )
    allowed = None
    if ring.mask_mod is not None:
        allowed = ring.mask_mod((), index, shape)
        seen = allowed & torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
        if not bool((seen if diagonal else allowed).any()):
            return False
    if ring.score_bias is None:
        return allowed
    with torch.no_grad():  # checked up front: the bias needs no gradient
        zeros = query.new_zeros(()).expand(shape)
        bias = ring.score_bias((zeros,), index, shape).to(query.dtype)
    return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


def check_score_bias(score_mod, query: Tensor) -> ModEvaluator:
    """``score_mod`` as ring attention applies it: a score bias per tile, which is exact only
    for a score_mod that adds a term not depending on the score and needing no gradient
    (ALiBi, a fixed relative bias).  Probed on a small tile; InputError otherwise."""
    evaluator = ModEvaluator(score_mod, "score_mod")
    device, heads = query.device, query.shape[1]
    index = (
        index_range(0, 1, device).view(1, 1, 1, 1),
        index_range(0, heads, device).view(1, -1, 1, 1),
        index_range(0, 4, device).view(1, 1, -1, 1),
        index_range(0, 4, device).view(1, 1, 1, -1),
    )
    shape = (1, heads, 4, 4)
    bias = evaluator((query.new_zeros(shape),), index, shape)
    if bias.requires_grad:
        raise InputError(
            "score_mod's result requires grad (it uses a learned tensor); ring_attention "
            "applies score_mod as a fixed bias and gives such tensors no gradient: detach "
            "them, or run attention with a learned bias on one process"
        )
    for value in (1.0, -3.5):
        shifted = evaluator((query.new_full(shape, value),), index, shape) - value
        if not torch.allclose(shifted, bias, rtol=1e-5, atol=1e-5, equal_nan=True):
            raise InputError(
                "ring_attention supports only a score_mod that adds a bias not depending on "
                "the score, score_mod(s, b, h, i, j) = s + bias(b, h, i, j) (ALiBi, a fixed "
                "relative bias); this one changes the score itself (e.g. softcap): run it "
                "with flex_attention on one process"
            )
    return evaluator
