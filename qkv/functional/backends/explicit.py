"""Attention that returns its weights, for what asking for them costs: writing them once.

    weights = softmax(Q Kᵀ · scale + bias)      # (B, H, Tq, Tk), written once
    output  = weights V                          # (B, H, Tq, Dv)

A layer asked for its weights (``need_weights=True``) must build the weight matrix anyway.
Here that one matrix does all the work: it is returned, multiplied into the output, and read
back by the backward instead of being recomputed.  Large matrices are computed a block at a
time -- scores, mask, softmax and the block's share of the output while the block is in
cache -- following a :class:`BlockPlan`, a small printable value that says which rows and
keys each block covers and how its backward writes the key/value gradients.  Besides the
returned weights no other Tq x Tk tensor is allocated, not even the zero "gradient"
autograd would otherwise build for the weights output.  (PyTorch's math path allocates
four, and on a CPU the first touch of each fresh page is a large part of the cost.)  Masks
are added as a 0/-inf bias, made once at the mask's own shape.  Under a causal mask a block
of rows skips the keys past its diagonal, forward and backward.

The returned weights carry no gradient (they are marked non-differentiable); gradients
flow to q, k and v through the output.  Modifying the returned weights in place before
``backward`` is caught by autograd's version check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = [
    "explicit_attention",
    "supports_explicit",
    "Block",
    "BlockPlan",
    "plan_blocks",
    "softmax_block",
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


class Block(NamedTuple):
    """One piece of the (B, H, Tq, Tk) weights: ``weights[batch, heads, rows, :keys]``.

    ``keys``: the leading keys these rows can see (all Tk, or fewer under a causal mask: the
    rest are past the diagonal and get weight 0).  ``writes_kv_grad``: in the backward this
    block *writes* the key/value gradients of its heads (it sees every key and runs first
    for them); the other blocks of the same heads *add* to them."""

    batch: int | slice
    heads: int | slice
    rows: slice
    keys: int
    writes_kv_grad: bool

    @property
    def index(self) -> tuple:
        """Index of the block's query rows in a (B, H, Tq, ...) tensor."""
        return self.batch, self.heads, self.rows

    @property
    def head_index(self) -> tuple:
        """Index of the block's heads in a (B, H, ...) tensor."""
        return self.batch, self.heads


@dataclass(frozen=True)
class BlockPlan:
    """How a (B, H, Tq, Tk) weight matrix is cut into blocks, forward and backward.

    ``blocks`` run in this order forward; the backward walks them in reverse
    (:attr:`backward_order`), so each group of heads meets its writer -- its last rows,
    which see every key -- before the blocks that add to the same key/value gradients.
    ``band``: rows in the largest block (the size of the causal band), 0 without causal."""

    shape: tuple[int, int, int, int]
    causal: bool
    blocks: tuple[Block, ...]
    band: int

    @property
    def backward_order(self) -> tuple[Block, ...]:
        return self.blocks[::-1]

    def __str__(self) -> str:
        lines = [f"BlockPlan{self.shape} causal={self.causal}: {len(self.blocks)} blocks"]
        for block in self.blocks:
            kv = "writes" if block.writes_kv_grad else "adds to"
            lines.append(
                f"  b={_span(block.batch)} h={_span(block.heads)} rows={_span(block.rows)} "
                f"keys=:{block.keys}  {kv} dK, dV"
            )
        return "\n".join(lines)


def _span(index: int | slice) -> str:
    if isinstance(index, int):
        return str(index)
    start, stop = index.start, index.stop
    return f"{'' if start is None else start}:{'' if stop is None else stop}"


def plan_blocks(shape: tuple[int, int, int, int], element_size: int, causal: bool) -> BlockPlan:
    """Cut a (B, H, Tq, Tk) weight matrix into blocks.

    A small matrix is one block (batched over B and H).  A large one is cut into blocks of
    at most ``BLOCK_ELEMENTS`` scores: several whole heads of one batch row (contiguous, so
    matmuls write into them directly), or, when one head is larger than that, blocks of
    query rows of one head.  Under a causal mask (from ``CAUSAL_SPLIT_FROM`` query rows)
    every piece is also cut into at least ``CAUSAL_ROW_SPLITS`` blocks of rows, so that
    each can skip the keys past its diagonal."""
    batch, heads, length, keys = shape
    splits = CAUSAL_ROW_SPLITS if causal and length >= CAUSAL_SPLIT_FROM else 1
    per_head = length * keys
    if math.prod(shape) * element_size < BLOCKED_FROM_BYTES:
        pieces = [(slice(None), slice(None))]
    elif per_head <= BLOCK_ELEMENTS:
        group = BLOCK_ELEMENTS // per_head
        pieces = [(b, slice(h, h + group)) for b in range(batch) for h in range(0, heads, group)]
    else:
        pieces = [(b, h) for b in range(batch) for h in range(heads)]
        splits = max(splits, math.ceil(per_head / BLOCK_ELEMENTS))
    rows = math.ceil(length / splits)
    starts = range(0, length, rows)
    blocks = []
    for b, h in pieces:
        for start in starts:
            stop = min(start + rows, length)
            # end-aligned causal: query row i sees keys 0 .. i + (Tk - Tq)
            seen = min(keys, stop + keys - length) if causal else keys
            blocks.append(Block(b, h, slice(start, stop), seen, stop == length))
    return BlockPlan(shape, causal, tuple(blocks), min(rows, length) if causal else 0)


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
    plan = plan_blocks(shape, query.element_size(), bool(causal))
    return _ExplicitAttention.apply(query, key, value, bias, plan, scale)


class _ExplicitAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, bias, plan: BlockPlan, scale):
        weights = query.new_empty(plan.shape)
        output = query.new_empty(*plan.shape[:-1], value.shape[-1])
        queries, keys_t = query * scale, key.transpose(-2, -1)
        band = causal_band(plan.band, weights.dtype, weights.device) if plan.causal else None
        for block in plan.blocks:
            probs = softmax_block(weights, queries, keys_t, bias, band, block)  # P = softmax(S)
            seen_values = value[block.head_index][..., : block.keys, :]
            torch.matmul(probs, seen_values, out=output[block.index])  # O = P V
        ctx.save_for_backward(query, key, value, weights, output)
        ctx.scale, ctx.plan = scale, plan
        ctx.mark_non_differentiable(weights)
        ctx.set_materialize_grads(False)  # no (B, H, Tq, Tk) zeros for the weights' "gradient"
        return output, weights

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output, _grad_weights):
        query, key, value, weights, output = ctx.saved_tensors
        if grad_output is None:  # no gradient reached the output (weights are not materialised)
            return None, None, None, None, None, None
        grad_query = torch.empty_like(query)
        grad_key = torch.empty_like(key)
        grad_value = torch.empty_like(value)
        # dV = Pᵀ dO;  dS = P * (dO Vᵀ - rowsum(dO * O));  dQ = dS K;  dK = dSᵀ Q
        delta = (grad_output * output).sum(dim=-1, keepdim=True)  # (B, H, Tq, 1)
        for block in ctx.plan.backward_order:
            rows, heads, seen = block.index, block.head_index, block.keys
            probs = weights[rows][..., :seen]
            grad_out, q_rows = grad_output[rows], query[rows]
            grad_scores = grad_out @ value[heads][..., :seen, :].transpose(-2, -1)
            grad_scores.sub_(delta[rows]).mul_(probs)
            torch.matmul(grad_scores, key[heads][..., :seen, :], out=grad_query[rows])
            if block.writes_kv_grad:  # sees every key: writes the whole of dK, dV for its heads
                torch.matmul(probs.transpose(-2, -1), grad_out, out=grad_value[heads])
                torch.matmul(grad_scores.transpose(-2, -1), q_rows, out=grad_key[heads])
            else:
                _add_product(grad_value[heads][..., :seen, :], probs.transpose(-2, -1), grad_out)
                _add_product(grad_key[heads][..., :seen, :], grad_scores.transpose(-2, -1), q_rows)
        grad_query.mul_(ctx.scale)
        grad_key.mul_(ctx.scale)
        return grad_query, grad_key, grad_value, None, None, None


def softmax_block(
    weights: Tensor,
    queries: Tensor,
    keys_t: Tensor,
    bias: Tensor | None,
    band: Tensor | None,
    block: Block,
) -> Tensor:
    """Fill one block of ``weights`` (B, H, Tq, Tk) with softmax(queries @ keys_t + bias)
    over the keys it sees (zeros past them); return those weights, (..., rows, seen).

    ``queries`` carry the scale; ``bias`` is expanded to (B, H, Tq, Tk) or None; ``band`` is
    the causal band (:func:`causal_band`) or None."""
    target, seen = weights[block.index], block.keys
    heads_keys_t = keys_t[block.head_index]
    if seen < weights.shape[-1]:  # causal: keys past the diagonal get weight 0
        target[..., seen:].zero_()
        probs = torch.matmul(queries[block.index], heads_keys_t[..., :seen])
    else:
        probs = torch.matmul(queries[block.index], heads_keys_t, out=target)
    mask_and_normalise(probs, None if bias is None else bias[block.index][..., :seen], band)
    if seen < weights.shape[-1]:
        target[..., :seen] = probs
    return probs


def _add_product(target: Tensor, a: Tensor, b: Tensor) -> None:
    """target += a @ b, accumulated inside the matmul (no temporary) where BLAS allows it."""
    if target.dim() == 2:
        target.addmm_(a, b)
    elif target.dim() == 3:
        target.baddbmm_(a, b)
    else:
        target += a @ b


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
    become zeros.  A NaN score makes its row NaN, as in :func:`qkv.functional.masked_softmax`
    (NaN in, NaN out): only rows whose every key is blocked are zeroed."""
    if bias is not None:
        scores += bias
    if band is not None:
        n = scores.shape[-2]
        scores[..., -n:] += band[:n, :n]
    # end-aligned causal alone never blanks a whole row; a NaN row has max NaN, not -inf
    blank = scores.amax(dim=-1, keepdim=True) == float("-inf") if bias is not None else None
    torch.softmax(scores, dim=-1, out=scores)
    if blank is not None and blank.any():
        scores.masked_fill_(blank, 0.0)
