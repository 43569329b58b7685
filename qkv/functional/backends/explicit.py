"""Attention that returns its weights, for what asking for them costs: writing them once.

A layer asked for its weights (``need_weights=True``) must build the (B, H, Tq, Tk) matrix
anyway.  Here that one matrix does all the work: it is filled with the softmax weights,
the output is ``weights @ v``, and the backward reads it back instead of recomputing it.
Large matrices are filled a block at a time (whole heads, or rows of one head) -- scores,
mask, softmax and the block's share of the output while the block is in cache -- and the
backward walks the same blocks with block-sized buffers, so besides the returned weights
no other Tq x Tk tensor is ever allocated -- not even the zero "gradient" autograd would
otherwise build for the weights output.  (PyTorch's math path allocates four, and on a
CPU the first touch of each fresh page is a large part of the cost.)  Masks are added as
a 0/-inf bias, made once at the mask's own shape (so a mask given at the full
(B, H, Tq, Tk) shape costs one such float tensor more).  Under a causal mask a block of
rows skips the keys past its diagonal, forward and backward.

The returned weights carry no gradient (they are marked non-differentiable); gradients
flow to q, k and v through the output.  Modifying the returned weights in place before
``backward`` is caught by autograd's version check.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "explicit_attention",
    "supports_explicit",
    "weight_blocks",
    "fill_weights",
    "additive_mask",
    "causal_band",
    "mask_and_normalise",
]

#: Weight matrices at least this large (bytes) are processed block by block.
BLOCKED_FROM_BYTES = 8 * 2**20
#: Scores per block: 2 MiB of float32 -- within a CPU's last-level cache, and few enough
#: blocks that the Python loop costs little.
BLOCK_ELEMENTS = 2**19
#: Causal pieces are cut into this many row blocks (at least): the block of rows i..j needs
#: only keys 0..j, so 4 blocks skip 3/8 of the square (the limit, many blocks, is 1/2) ...
CAUSAL_ROW_SPLITS = 4
#: ... from this many query rows (blocks of 64 rows or more; smaller ones cost more in the
#: Python loop than the skipped keys save: measured 1.4x slower at B=32, T=128).
CAUSAL_SPLIT_FROM = 256


def supports_explicit(query: Tensor, mask: Tensor | None, dropout: float) -> str | None:
    """Why :func:`explicit_attention` cannot serve a call, or None if it can."""
    if dropout > 0:
        return "dropout on the weights (the returned weights would not be the ones used)"
    if query.dtype not in (torch.float32, torch.float64):
        return f"{query.dtype} (works in float32/float64 only)"
    if mask is not None and mask.dtype != torch.bool and mask.requires_grad:
        return "a float bias that requires grad"
    return None


def explicit_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, causal: bool, scale: float
) -> tuple[Tensor, Tensor]:
    """softmax(scale * q k^T, masked) @ v and the weights, computed from one matrix.

    Inputs as checked by :func:`qkv.functional.attention_with_weights` (which is the public
    entry): query (B, H, Tq, Dh), key (B, H, Tk, Dh), value (B, H, Tk, Dv) with grouped
    heads already repeated, mask broadcastable to (B, H, Tq, Tk) -> output (B, H, Tq, Dv),
    weights (B, H, Tq, Tk) without gradient.
    """
    shape = (*query.shape[:-1], key.shape[-2])
    bias = additive_mask(mask, query.dtype)
    if bias is not None:
        bias = bias.expand(shape)  # a view: slicing it per block copies nothing
    return _ExplicitAttention.apply(query, key, value, bias, bool(causal), scale)


class _ExplicitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, bias, causal, scale):
        batch, heads, length, keys = (*query.shape[:-1], key.shape[-2])
        weights = query.new_empty(batch, heads, length, keys)
        output = query.new_empty(batch, heads, length, value.shape[-1])
        queries, keys_t = query * scale, key.transpose(-2, -1)
        for bh, rows, seen, probs in fill_weights(weights, queries, keys_t, bias, causal):
            torch.matmul(probs, value[bh][..., :seen, :], out=output[bh + (rows,)])
        ctx.save_for_backward(query, key, value, weights, output)
        ctx.scale, ctx.causal = scale, causal
        ctx.mark_non_differentiable(weights)
        ctx.set_materialize_grads(False)  # no (B, H, Tq, Tk) zeros for the weights' "gradient"
        return output, weights

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output, _grad_weights):
        query, key, value, weights, output = ctx.saved_tensors
        if grad_output is None:  # no gradient reached the output (weights are not materialised)
            return None, None, None, None, None, None
        length, keys = weights.shape[-2:]
        grad_query = torch.empty_like(query)
        grad_key = torch.empty_like(key)
        grad_value = torch.empty_like(value)
        # dS = P * (dP - rowsum(dO * O)), with dP = dO v^T
        delta = (grad_output * output).sum(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        # Walking the blocks backwards, a head's last rows come first: they see every key, so
        # they write the key/value gradients, which the earlier rows then add to.
        for bh, rows in reversed(list(weight_blocks(weights, ctx.causal))):
            seen = _visible_keys(rows, ctx.causal, length, keys)
            probs = weights[bh + (rows,)][..., :seen]
            grad_out, q_rows = grad_output[bh + (rows,)], query[bh + (rows,)]
            grad_scores = grad_out @ value[bh][..., :seen, :].transpose(-2, -1)
            grad_scores.sub_(delta[bh + (rows,)]).mul_(probs)
            torch.matmul(grad_scores, key[bh][..., :seen, :], out=grad_query[bh + (rows,)])
            if rows.stop is None or rows.stop >= length:
                torch.matmul(probs.transpose(-2, -1), grad_out, out=grad_value[bh])
                torch.matmul(grad_scores.transpose(-2, -1), q_rows, out=grad_key[bh])
            else:
                _add_product(grad_value[bh][..., :seen, :], probs.transpose(-2, -1), grad_out)
                _add_product(grad_key[bh][..., :seen, :], grad_scores.transpose(-2, -1), q_rows)
        grad_query.mul_(ctx.scale)
        grad_key.mul_(ctx.scale)
        return grad_query, grad_key, grad_value, None, None, None


def fill_weights(
    weights: Tensor, queries: Tensor, keys_t: Tensor, bias: Tensor | None, causal: bool
) -> Iterator[tuple[tuple, slice, int, Tensor]]:
    """Fill ``weights`` (B, H, Tq, Tk) with softmax(queries @ keys_t + bias, causal) a
    block at a time (:func:`weight_blocks`); after each block yield ``(bh, rows, seen,
    probs)``: the block's weights over the ``seen`` keys it can see, while in cache.  A
    causal block of rows computes only those keys and zeroes the rest.  ``queries`` carry
    the scale; ``bias`` is expanded to (B, H, Tq, Tk) or None."""
    length, keys = weights.shape[-2:]
    blocks = list(weight_blocks(weights, causal))
    band = None
    if causal:  # as large as the largest block of rows (the first): not Tq x Tq
        first = blocks[0][1]
        band = causal_band(len(range(length)[first]), weights.dtype, weights.device)
    for bh, rows in blocks:
        block = weights[bh + (rows,)]
        seen = _visible_keys(rows, causal, length, keys)
        if seen < keys:  # keys past the diagonal get weight 0
            block[..., seen:].zero_()
            probs = torch.matmul(queries[bh + (rows,)], keys_t[bh][..., :seen])
        else:
            probs = torch.matmul(queries[bh + (rows,)], keys_t[bh], out=block)
        mask_and_normalise(probs, None if bias is None else bias[bh + (rows,)][..., :seen], band)
        if seen < keys:
            block[..., :seen] = probs
        yield bh, rows, seen, probs


def _add_product(target: Tensor, a: Tensor, b: Tensor) -> None:
    """target += a @ b, accumulated inside the matmul (no temporary) where BLAS allows it."""
    if target.dim() == 2:
        target.addmm_(a, b)
    elif target.dim() == 3:
        target.baddbmm_(a, b)
    else:
        target += a @ b


def _visible_keys(rows: slice, causal: bool, length: int, keys: int) -> int:
    """How many leading keys a block of query rows can see: all of them, unless the block is
    a bounded range of rows under an (end-aligned) causal mask."""
    if not causal or rows.stop is None:
        return keys
    return min(keys, rows.stop + keys - length)


def weight_blocks(weights: Tensor, causal: bool = False) -> Iterator[tuple[tuple, slice]]:
    """Index pieces ``(bh, rows)`` of a (B, H, Tq, Tk) matrix, ``weights[bh + (rows,)]``.

    A small matrix is one piece (batched over B and H).  A large one is cut into pieces of
    at most ``BLOCK_ELEMENTS`` scores: several whole heads of one batch row, ``(b, h0:h1)``
    (contiguous, so matmuls write into them directly), or, when one head is larger than
    that, blocks of query rows of one head, ``(b, h)``.  Few pieces keep the Python loop
    cheap; each piece stays in cache between its passes.  Under a causal mask (from
    ``CAUSAL_SPLIT_FROM`` query rows) every piece is also cut into at least
    ``CAUSAL_ROW_SPLITS`` blocks of rows, so that each can skip the keys past its diagonal."""
    batch, heads, length, keys = weights.shape
    splits = CAUSAL_ROW_SPLITS if causal and length >= CAUSAL_SPLIT_FROM else 1
    per_head = length * keys
    if weights.numel() * weights.element_size() < BLOCKED_FROM_BYTES:
        pieces = [(slice(None), slice(None))]
    elif per_head <= BLOCK_ELEMENTS:
        group = BLOCK_ELEMENTS // per_head
        pieces = [(b, slice(h, h + group)) for b in range(batch) for h in range(0, heads, group)]
    else:
        pieces = [(b, h) for b in range(batch) for h in range(heads)]
        splits = max(splits, math.ceil(per_head / BLOCK_ELEMENTS))
    if splits == 1:
        yield from ((bh, slice(None)) for bh in pieces)
        return
    rows = math.ceil(length / splits)
    for bh in pieces:
        for start in range(0, length, rows):
            yield bh, slice(start, start + rows)


def additive_mask(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A boolean mask (True = may attend) as an additive bias, 0 or -inf, at the mask's own
    unbroadcast shape; a float bias (or None) as it is.  On a CPU adding a bias is about
    ten times faster than ``masked_fill``, which is worth one conversion per call."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill_(mask.logical_not(), float("-inf"))


def causal_band(size: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """(size, size): -inf above the diagonal, 0 on and below it.

    Under an end-aligned causal mask, a block of n query rows sees a prefix of the keys, and
    only the last n of those are blocked for some of its rows -- exactly as ``band[:n, :n]``
    says.  So one small band masks every block, instead of a Tq x Tk mask."""
    return torch.full((size, size), float("-inf"), dtype=dtype, device=device).triu_(1)


def mask_and_normalise(scores: Tensor, bias: Tensor | None, band: Tensor | None) -> None:
    """In place on (..., n, keys seen) scores: add the mask's bias and, under a causal mask,
    the band on the last n keys; softmax over the last dim; rows with nothing to attend
    become zeros."""
    if bias is not None:
        scores += bias
    if band is not None:
        n = scores.shape[-2]
        scores[..., -n:] += band[:n, :n]
    torch.softmax(scores, dim=-1, out=scores)
    if bias is not None:  # end-aligned causal alone never blanks a whole row
        scores.nan_to_num_(0.0)
