"""Attention that returns its weights, for what asking for them costs: writing them once.

A layer asked for its weights (``need_weights=True``) must build the (B, H, Tq, Tk) matrix
anyway.  Here that one matrix does all the work: it is filled with the softmax weights,
the output is ``weights @ v``, and the backward reads it back instead of recomputing it.
Large matrices are filled a block at a time (whole heads, or rows of one head) -- scores,
mask, softmax and the block's share of the output while the block is in cache -- and the
backward walks the same blocks with block-sized buffers, so besides the returned weights
no other Tq x Tk tensor is ever allocated -- not even the zero "gradient" autograd would
otherwise build for the weights output.  (PyTorch's math path allocates four, and on a
CPU the first touch of each fresh page is a large part of the cost.)  Under a causal mask
a block of rows skips the keys past its diagonal, forward and backward.

The returned weights carry no gradient (they are marked non-differentiable); gradients
flow to q, k and v through the output.  Modifying the returned weights in place before
``backward`` is caught by autograd's version check.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..masks import causal_mask

__all__ = [
    "explicit_attention",
    "supports_explicit",
    "weight_blocks",
    "mask_and_normalise",
]

#: Weight matrices at least this large (bytes) are processed block by block.
BLOCKED_FROM_BYTES = 8 * 2**20
#: Scores per block: 2 MiB of float32 -- within a CPU's last-level cache, and few enough
#: blocks that the Python loop costs little.
BLOCK_ELEMENTS = 2**19


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
    if mask is not None:
        mask = mask.expand(shape)  # a view: slicing it per block copies nothing
    above = None
    if causal:
        above = causal_mask(shape[-2], shape[-1], device=query.device).logical_not()
    return _ExplicitAttention.apply(query, key, value, mask, above, scale)


class _ExplicitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, above, scale):
        batch, heads, length, keys = (*query.shape[:-1], key.shape[-2])
        weights = query.new_empty(batch, heads, length, keys)
        output = query.new_empty(batch, heads, length, value.shape[-1])
        queries, keys_t = query * scale, key.transpose(-2, -1)
        causal = above is not None
        for bh, rows in weight_blocks(weights):
            block = weights[bh + (rows,)]
            seen = _visible_keys(rows, causal, length, keys)
            if seen < keys:  # a causal block of rows: keys past the diagonal get weight 0
                block[..., seen:].zero_()
                scores = torch.matmul(queries[bh + (rows,)], keys_t[bh][..., :seen])
            else:
                scores = torch.matmul(queries[bh + (rows,)], keys_t[bh], out=block)
            mask_and_normalise(
                scores,
                None if mask is None else mask[bh + (rows,)][..., :seen],
                None if above is None else above[rows][..., :seen],
            )
            if seen < keys:
                block[..., :seen] = scores
            torch.matmul(scores, value[bh][..., :seen, :], out=output[bh + (rows,)])
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
        for bh, rows in reversed(list(weight_blocks(weights))):
            seen = _visible_keys(rows, ctx.causal, length, keys)
            probs = weights[bh + (rows,)][..., :seen]
            grad_out, q_rows = grad_output[bh + (rows,)], query[bh + (rows,)]
            grad_scores = grad_out @ value[bh][..., :seen, :].transpose(-2, -1)
            grad_scores.sub_(delta[bh + (rows,)]).mul_(probs)
            torch.matmul(grad_scores, key[bh][..., :seen, :], out=grad_query[bh + (rows,)])
            if rows.stop is None or rows.stop >= length:
                torch.matmul(probs.transpose(-2, -1), grad_out, out=grad_value[bh])
                torch.matmul(grad_scores.transpose(-2, -1), q_rows, out=grad_key[bh])
            else:  # a row block of one head: 2-D
                grad_value[bh][:seen].addmm_(probs.transpose(-2, -1), grad_out)
                grad_key[bh][:seen].addmm_(grad_scores.transpose(-2, -1), q_rows)
        grad_query.mul_(ctx.scale)
        grad_key.mul_(ctx.scale)
        return grad_query, grad_key, grad_value, None, None, None


def _visible_keys(rows: slice, causal: bool, length: int, keys: int) -> int:
    """How many leading keys a block of query rows can see: all of them, unless the block is
    a bounded range of rows under an (end-aligned) causal mask."""
    if not causal or rows.stop is None:
        return keys
    return min(keys, rows.stop + keys - length)


def weight_blocks(weights: Tensor) -> Iterator[tuple[tuple, slice]]:
    """Index pieces ``(bh, rows)`` of a (B, H, Tq, Tk) matrix, ``weights[bh + (rows,)]``.

    A small matrix is one piece (batched over B and H).  A large one is cut into pieces of
    at most ``BLOCK_ELEMENTS`` scores: several whole heads of one batch row, ``(b, h0:h1)``
    (contiguous, so matmuls write into them directly), or, when one head is larger than
    that, blocks of query rows of one head, ``(b, h)``.  Few pieces keep the Python loop
    cheap; each piece stays in cache between its passes."""
    batch, heads, length, keys = weights.shape
    if weights.numel() * weights.element_size() < BLOCKED_FROM_BYTES:
        yield (slice(None), slice(None)), slice(None)
        return
    per_head = length * keys
    if per_head <= BLOCK_ELEMENTS:
        group = BLOCK_ELEMENTS // per_head
        for b in range(batch):
            for h in range(0, heads, group):
                yield (b, slice(h, h + group)), slice(None)
        return
    rows = max(1, BLOCK_ELEMENTS // keys)
    for b in range(batch):
        for h in range(heads):
            for start in range(0, length, rows):
                yield (b, h), slice(start, start + rows)


def mask_and_normalise(scores: Tensor, mask: Tensor | None, above: Tensor | None) -> None:
    """In place: blocked positions to -inf, then softmax over the last dim; rows with
    nothing to attend become zeros."""
    if mask is not None and mask.dtype == torch.bool:
        scores.masked_fill_(mask.logical_not(), float("-inf"))
    elif mask is not None:
        scores += mask
    if above is not None:
        scores.masked_fill_(above, float("-inf"))
    torch.softmax(scores, dim=-1, out=scores)
    if mask is not None:  # end-aligned causal alone never blanks a whole row
        scores.nan_to_num_(0.0)
