"""The block-sparse tile kernel behind :func:`qkv.flex_attention`.

The online softmax and recomputing backward of :mod:`.chunked_kernel`, walking the tiles a
:class:`~qkv.functional.block_mask.BlockMask` lists instead of every tile: for each query
block, the runs of consecutive key blocks it visits.  Empty blocks are never computed,
forward or backward; full blocks apply no mask; partial blocks add the mask_mod's -inf on
their tile.  With s_ij = score_mod(scale * q_i . k_j) (or -inf where masked):

    forward:  m_i' = max(m_i, max_j s_ij);  acc_i' = acc_i e^(m_i - m_i') + sum_j e^(s_ij - m_i') [v_j, 1]
              out_i = acc_i[:Dv] / acc_i[Dv],  lse_i = m_i + log acc_i[Dv]
    backward: P = e^(s - lse);  dV += P^T dO;  dS = P * (dO V^T - delta),  delta_i = dO_i . out_i - dlse_i
              dS_raw = dS * ds/ds_raw (autograd through score_mod, also into captured tensors)
              dQ += scale dS_raw K;  dK += scale dS_raw^T Q

Exponentials are base 2 (log2 e folded into the query rows, or into the scores after a
score_mod).  Memory besides the inputs and their gradients is O(T) plus one tile.

*Layout.*  A group of (batch, head) pairs shares one block-mask entry.  It is walked one
"slice" at a time: one key/value head of one batch, with the rows of the query heads it
serves stacked (grouped-query attention without repeating K/V; a key/value batch of 1
stacks the query batches it serves too).  A bundle of query blocks that visit alike (see
:class:`.flex_plan._Bundle`) is one batched tile (n, M, c): n blocks, M stacked rows, c key
columns, every operand a strided view of the inputs -- the k-th block's keys are the first
block's shifted by k * step rows.  Viewed as (n, [nb,] G, r, c) "logical" for
mask_mod/score_mod and their indices.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..block_mask import index_range
from .flex_biases import bundle_biases
from .flex_plan import FlexPlan, _Bundle, _Group, _Run, plan_flex

__all__ = ["FlexPlan", "FlexAttentionFunction", "plan_flex"]

LOG2E, LN2 = math.log2(math.e), math.log(2.0)


def _windows(x: Tensor, start: int, step: int, count: int, length: int) -> Tensor:
    """x (..., T, E) -> the view (count, ..., length, E) of rows start + k * step on."""
    *lead, row, col = x.stride()
    size = (count, *x.shape[:-2], length, x.shape[-1])
    return x.as_strided(size, (step * row, *lead, row, col), x.storage_offset() + start * row)


class _Slices:
    """One group's tensors, and for each of its slices the views a bundle computes on."""

    def __init__(self, group: _Group, q: Tensor, k: Tensor, v: Tensor):
        self.group = group
        self.nb = group.batches.stop - group.batches.start
        self.nkv = group.kv_heads.stop - group.kv_heads.start
        self.k = k[group.kv_batches, group.kv_heads].flatten(0, 1)  # (P, Tk, Dh)
        self.v = v[group.kv_batches, group.kv_heads].flatten(0, 1)
        self.count = self.nkv if group.folded else self.nb * self.nkv  # P slices
        heads = index_range(group.heads.start, group.heads.stop, q.device)
        self.heads = heads.view(self.nkv, group.per_kv)
        self.batches = index_range(group.batches.start, group.batches.stop, q.device)

    def five(self, x: Tensor) -> Tensor:
        """(B, H, T, E) -> this group's (nb, nkv, G, T, E) view."""
        part = x[self.group.batches, self.group.heads]
        return part.view(self.nb, self.nkv, self.group.per_kv, *part.shape[2:])

    def rows(self, x5: Tensor, p: int) -> Tensor:
        """Slice p of a (nb, nkv, G, T, E) view: (G, T, E), or (nb, G, T, E) folded."""
        return x5[:, p] if self.group.folded else x5[p // self.nkv, p % self.nkv]

    def index(self, p: int, bundle: _Bundle, cols: slice) -> tuple[Tensor, ...]:
        """(b, h, q_idx, kv_idx) of slice p's tile of ``cols`` (the bundle's first block's),
        each shaped to broadcast to its logical (n, [nb,] G, r, c) view."""
        device = self.heads.device
        firsts = index_range(0, bundle.count, device).view(-1, 1, 1, 1) * bundle.step
        q = firsts + index_range(bundle.start, bundle.start + bundle.rows, device).view(-1, 1)
        kv = firsts + index_range(cols.start, cols.stop, device).view(1, -1)  # (n, 1, 1, c)
        if self.group.folded:
            b, h = self.batches.view(-1, 1, 1, 1), self.heads[p].view(1, -1, 1, 1)
            return b, h, q.unsqueeze(1), kv.unsqueeze(1)
        b = self.batches[p // self.nkv].view(1, 1, 1)
        return b, self.heads[p % self.nkv].view(-1, 1, 1), q, kv

    def logical(self, tile: Tensor) -> Tensor:
        """A slice's (n, M, c) tile -> its (n, [nb,] G, r, c) view."""
        g = self.group.per_kv
        if self.group.folded:
            return tile.view(tile.shape[0], self.nb, g, -1, tile.shape[-1])
        return tile.view(tile.shape[0], g, -1, tile.shape[-1])

    def bias(self, bias: Tensor, p: int) -> Tensor:
        """A bundle's (n, nb, nkv, G, r, c)-broadcastable bias -> slice p's part."""
        full = bias.view(*bias.shape[:1], *[1] * (6 - bias.dim()), *bias.shape[1:])
        full = full.expand(bias.shape[0], self.nb, self.nkv, *full.shape[3:])
        return full[:, :, p] if self.group.folded else full[:, p // self.nkv, p % self.nkv]


def _read(x5: Tensor, slices: _Slices, p: int, bundle: _Bundle) -> Tensor:
    """Slice p's rows of the bundle's blocks as a (n, M, E) tensor (a view where it can)."""
    tile = _windows(slices.rows(x5, p), bundle.start, bundle.step, bundle.count, bundle.rows)
    return tile.reshape(bundle.count, -1, tile.shape[-1])


def _write(tile: Tensor, x5: Tensor, slices: _Slices, p: int, bundle: _Bundle) -> None:
    """Write a (n, M, E) tile into slice p's rows of the bundle's blocks."""
    target = _windows(slices.rows(x5, p), bundle.start, bundle.step, bundle.count, bundle.rows)
    target.copy_(tile.view(target.shape))


def _keys(x: Tensor, bundle: _Bundle, cols: slice) -> Tensor:
    """(Tk, E) -> the (n, c, E) view of each block's ``cols`` (the first block's)."""
    return _windows(x, cols.start, bundle.step, bundle.count, cols.stop - cols.start)


def _accumulate(x: Tensor, grad: Tensor, bundle: _Bundle, cols: slice) -> None:
    """x[cols of block k] += grad[k] for (Tk, E) x: in pieces no wider than the step, so
    the blocks' columns within one piece never overlap."""
    width = min(bundle.step, cols.stop - cols.start) if bundle.count > 1 else grad.shape[1]
    for lo in range(0, grad.shape[1], width):
        hi = min(lo + width, grad.shape[1])
        _keys(x, bundle, slice(cols.start + lo, cols.start + hi)).add_(grad[:, lo:hi])


class _Tile(NamedTuple):
    """Where a batched tile stands: the group's slices, slice p, the bundle, its masks."""

    slices: _Slices
    p: int
    bundle: _Bundle
    biases: dict[int, Tensor]


def _modified_scores(tile: _Tile, plan: FlexPlan, scores: Tensor, run: _Run) -> Tensor:
    """A slice's raw scores (n, M, c) of a run -> score_mod'ed, masked (-inf), in base 2
    (without a score_mod the query rows already carry log2 e); in place where no gradient
    flows through score_mod."""
    slices = tile.slices
    if plan.score is not None:
        logical = slices.logical(scores)
        index = slices.index(tile.p, tile.bundle, run.cols)
        scores = plan.score((logical,), index, logical.shape).view(scores.shape)
        if torch.is_grad_enabled():
            scores = scores.clone()  # the in-place masking below must not touch saved tensors
    logical = slices.logical(scores)
    for part in run.partial:
        cols = slice(part.start - run.cols.start, part.stop - run.cols.start)
        logical[..., cols].add_(slices.bias(tile.biases[part.start], tile.p))
    return scores if plan.score is None else scores.mul_(LOG2E)


def _forward(q: Tensor, k: Tensor, v: Tensor, plan: FlexPlan) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, H, Tq, Dh), k (Bk, Hkv, Tk, Dh), v (Bk, Hkv, Tk, Dv) -> out (B, H, Tq, Dv),
    lse (B, H, Tq) and the largest score max_j s_ij (B, H, Tq) (both -inf for a query that
    may attend no key)."""
    out = q.new_zeros(*q.shape[:3], v.shape[-1])
    lse = q.new_full((*q.shape[:3], 1), float("-inf"))
    largest = q.new_full((*q.shape[:3], 1), float("-inf"))
    base2 = plan.score is None  # no score_mod to see the scores: fold log2 e into q
    factor = plan.scale * (LOG2E if base2 else 1.0)
    for group in plan.groups:
        slices = _Slices(group, q, k, v)
        q5, out5, lse5, max5 = map(slices.five, (q, out, lse, largest))
        v_ones = torch.cat([slices.v, slices.v.new_ones(*slices.v.shape[:-1], 1)], -1)
        for bundle in group.bundles:
            biases = bundle_biases(slices, plan, bundle, q.dtype)
            for p in range(slices.count):
                qt = _read(q5, slices, p, bundle) * factor
                row_max, acc = None, None
                for run in bundle.runs:
                    # matmul, not bmm: bmm is a third slower on overlapping transposed views
                    scores = torch.matmul(qt, _keys(slices.k[p], bundle, run.cols).mT)
                    scores = _modified_scores(_Tile(slices, p, bundle, biases), plan, scores, run)
                    new_max = scores.amax(-1, keepdim=True)
                    if row_max is not None:
                        new_max = torch.maximum(new_max, row_max)
                    # A row with no key allowed yet has max -inf: shift by 0, exp gives 0, not NaN.
                    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
                    probs = scores.sub_(shift).exp2_()
                    values = _keys(v_ones[p], bundle, run.cols)
                    if acc is None:
                        acc = torch.bmm(probs, values)
                    else:
                        acc.mul_(torch.exp2(row_max - shift)).baddbmm_(probs, values)
                    row_max = new_max
                row_sum = acc[..., -1:]
                tiny = torch.finfo(q.dtype).tiny
                _write(acc[..., :-1] / row_sum.clamp(min=tiny), out5, slices, p, bundle)
                _write(torch.xlogy(1.0, row_sum) + row_max * LN2, lse5, slices, p, bundle)
                _write(row_max * LN2, max5, slices, p, bundle)
    return out, lse.squeeze(-1), largest.squeeze(-1)


def _backward(q, k, v, out, lse, grad_out, grad_lse, plan: FlexPlan, captured):
    """Gradients of q, k, v and of the captured tensors (recomputing every visited tile)."""
    finite_lse = lse.masked_fill(lse == float("-inf"), torch.finfo(q.dtype).max / 4)
    lse2 = (finite_lse * LOG2E).unsqueeze(-1)  # base 2
    delta = ((grad_out * out).sum(-1) - grad_lse).unsqueeze(-1)  # (B, H, Tq, 1)
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    grad_captured = [None] * len(captured)
    if plan.score is not None:
        # The forward watched every tile's reads (:mod:`..captures`); the backward
        # recomputes the same tiles from the same inputs and reads the same tensors.
        plan.score.watch = None
    base2 = plan.score is None  # the forward folded log2 e into q
    for group in plan.groups:
        slices = _Slices(group, q, k, v)
        q5, lse5, delta5, grad_out5, grad_q5 = map(slices.five, (q, lse2, delta, grad_out, grad_q))
        gk = grad_k[group.kv_batches, group.kv_heads].flatten(0, 1)
        gv = grad_v[group.kv_batches, group.kv_heads].flatten(0, 1)
        for bundle in group.bundles:
            biases = bundle_biases(slices, plan, bundle, q.dtype)
            for p in range(slices.count):
                tile = _Tile(slices, p, bundle, biases)
                qt = _read(q5, slices, p, bundle) * plan.scale
                q_scores = qt * LOG2E if base2 else qt
                lse_t, delta_t = _read(lse5, slices, p, bundle), _read(delta5, slices, p, bundle)
                do_t = _read(grad_out5, slices, p, bundle)
                dq = None
                for run in bundle.runs:
                    keys = _keys(slices.k[p], bundle, run.cols)
                    raw = torch.matmul(q_scores, keys.mT)  # (n, M, c)
                    if plan.score is not None:
                        raw.requires_grad_()
                        with torch.enable_grad():
                            modified = _modified_scores(tile, plan, raw, run)
                        probs = modified.detach().sub(lse_t).exp2_()
                    else:
                        probs = _modified_scores(tile, plan, raw, run).sub_(lse_t).exp2_()
                    _accumulate(gv[p], torch.bmm(probs.transpose(1, 2), do_t), bundle, run.cols)
                    values = _keys(slices.v[p], bundle, run.cols)
                    grad_scores = torch.matmul(do_t, values.mT)
                    grad_scores.sub_(delta_t).mul_(probs)  # dS = P * (dP - delta)
                    if plan.score is not None:
                        grad_scores = _through_score_mod(
                            modified, raw, grad_scores, captured, grad_captured
                        )
                    dq = torch.bmm(grad_scores, keys) if dq is None else (
                        dq.baddbmm_(grad_scores, keys)
                    )  # fmt: skip
                    grad_keys = torch.bmm(grad_scores.transpose(1, 2), qt)
                    _accumulate(gk[p], grad_keys, bundle, run.cols)
                _write(dq * plan.scale, grad_q5, slices, p, bundle)
    return grad_q, grad_k, grad_v, grad_captured


def _through_score_mod(modified, raw, grad_scores, captured, grad_captured) -> Tensor:
    """dS (w.r.t. the modified, base-e scores) -> dS_raw, adding captured tensors' grads."""
    # modified is in base 2 (LOG2E * s'), P was built from it: dL/d(modified) = dS / LOG2E.
    if not modified.requires_grad:  # scores from neither the raw score nor a learned tensor
        return torch.zeros_like(raw)
    inputs = [raw, *captured]
    grads = torch.autograd.grad(modified, inputs, grad_scores / LOG2E, allow_unused=True)
    for n, grad in enumerate(grads[1:]):
        if grad is not None:
            grad_captured[n] = grad if grad_captured[n] is None else grad_captured[n] + grad
    return torch.zeros_like(raw) if grads[0] is None else grads[0]


class FlexAttentionFunction(torch.autograd.Function):
    """(query, key, value, plan, *captured) -> (output, lse, max_scores); max_scores has no
    gradient.

    Shapes: query (B, H, Tq, Dh); key (Bk, Hkv, Tk, Dh), value (Bk, Hkv, Tk, Dv) with Bk in
    {1, B}, Hkv dividing H; one float dtype (float32 or float64).  ``captured``: tensors
    the score_mod reads that require grad (they get their gradients)."""

    @staticmethod
    def forward(ctx, query, key, value, plan, *captured):
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        output, lse, max_scores = _forward(query, key, value, plan)
        ctx.save_for_backward(query, key, value, output, lse, *captured)
        ctx.mark_non_differentiable(max_scores)
        ctx.plan = plan
        return output, lse, max_scores

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output, grad_lse, _grad_max_scores):
        query, key, value, output, lse, *captured = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_captured = _backward(
            query, key, value, output, lse, grad_output.contiguous(), grad_lse, ctx.plan, captured
        )
        return grad_q, grad_k, grad_v, None, *grad_captured
