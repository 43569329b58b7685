"""The block-sparse tile kernel behind :func:`qkv.flex_attention`.

The online softmax and recomputing backward of :mod:`.chunked_kernel`, walking the tiles a
:class:`~qkv.functional.block_mask.BlockMask` lists instead of every tile: for each query
block, the runs of consecutive key blocks it visits.  Empty blocks are never computed,
forward or backward; full blocks apply no mask; partial blocks evaluate ``mask_mod`` on
their tile.  With s_ij = score_mod(scale * q_i . k_j) (or -inf where masked):

    forward:  m_i' = max(m_i, max_j s_ij);  acc_i' = acc_i e^(m_i - m_i') + sum_j e^(s_ij - m_i') [v_j, 1]
              out_i = acc_i[:Dv] / acc_i[Dv],  lse_i = m_i + log acc_i[Dv]
    backward: P = e^(s - lse);  dV += P^T dO;  dS = P * (dO V^T - delta),  delta_i = dO_i . out_i - dlse_i
              dS_raw = dS * ds/ds_raw (autograd through score_mod, also into captured tensors)
              dQ += scale dS_raw K;  dK += scale dS_raw^T Q

Exponentials are base 2 (log2 e folded into the scores).  Memory besides the inputs and
their gradients is O(T) plus one tile.

*Layout.*  A group of (batch, head) pairs shares one block-mask entry.  Its query rows are
stacked so that each key/value head meets all the query heads it serves in one matmul
(grouped-query attention without repeating K/V), and a key/value batch of 1 meets every
query batch the same way.  A tile is (P, M, c) "physical" -- P matmul batches, M stacked
rows -- and viewed as (nb, nkv, G, r, c) "logical" for mask_mod/score_mod and indices.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..block_mask import index_range
from .flex_plan import FlexPlan, _Group, _Run, plan_flex

__all__ = ["FlexPlan", "FlexAttentionFunction", "plan_flex"]

LOG2E, LN2 = math.log2(math.e), math.log(2.0)


class _Tiles:
    """One group's tensors in the physical layout, and the index tensors of its tiles."""

    def __init__(self, group: _Group, q: Tensor, k: Tensor, v: Tensor):
        self.group = group
        self.nb = group.batches.stop - group.batches.start
        self.nkv = group.kv_heads.stop - group.kv_heads.start
        self.q5 = self.five(q)
        k_part, v_part = k[group.kv_batches, group.kv_heads], v[group.kv_batches, group.kv_heads]
        self.k = k_part.reshape(-1, *k_part.shape[2:])  # (P, Tk, Dh)
        self.v = v_part.reshape(-1, *v_part.shape[2:])
        device = q.device
        self.b = index_range(group.batches.start, group.batches.stop, device).view(-1, 1, 1, 1, 1)
        heads = index_range(group.heads.start, group.heads.stop, device)
        self.h = heads.view(1, self.nkv, group.per_kv, 1, 1)

    def five(self, x: Tensor) -> Tensor:
        """(B, H, T, E) -> this group's (nb, nkv, G, T, E) view."""
        part = x[self.group.batches, self.group.heads]
        return part.view(self.nb, self.nkv, self.group.per_kv, *part.shape[2:])

    def rows_in(self, x5: Tensor, rows: slice) -> Tensor:
        """(nb, nkv, G, T, E) -> the rows' physical (P, M, E) copy."""
        tile = x5[:, :, :, rows]
        if self.group.folded:
            tile = tile.transpose(0, 1)
            return tile.reshape(self.nkv, -1, tile.shape[-1])
        return tile.reshape(self.nb * self.nkv, -1, tile.shape[-1])

    def rows_out(self, tile: Tensor, x5: Tensor, rows: slice) -> None:
        """Write a physical (P, M, E) tile into the rows of a (nb, nkv, G, T, E) view."""
        x5[:, :, :, rows] = self.logical(tile)

    def logical(self, tile: Tensor) -> Tensor:
        """Physical (P, M, E) -> its (nb, nkv, G, r, E) view."""
        g = self.group.per_kv
        if self.group.folded:
            return tile.view(self.nkv, self.nb, g, -1, tile.shape[-1]).transpose(0, 1)
        return tile.view(self.nb, self.nkv, g, -1, tile.shape[-1])

    def physical(self, tile5: Tensor) -> Tensor:
        """Logical (nb, nkv, G, r, c) -> physical (P, M, c)."""
        if self.group.folded:
            tile5 = tile5.transpose(0, 1)
            return tile5.reshape(self.nkv, -1, tile5.shape[-1])
        return tile5.reshape(self.nb * self.nkv, -1, tile5.shape[-1])

    def index(self, rows: slice, cols: slice, device: torch.device) -> tuple[Tensor, ...]:
        """(b, h, q_idx, kv_idx), each shaped to broadcast to (nb, nkv, G, r, c)."""
        q = index_range(rows.start, rows.stop, device).view(1, 1, 1, -1, 1)
        kv = index_range(cols.start, cols.stop, device).view(1, 1, 1, 1, -1)
        return self.b, self.h, q, kv


def _modified_scores(
    tiles: _Tiles, plan: FlexPlan, scores: Tensor, rows: slice, run: _Run
) -> Tensor:
    """Physical raw scores (P, M, c) of a run -> score_mod'ed, masked (-inf), in base 2;
    in place where no gradient flows through score_mod."""
    if plan.score is not None:
        logical = tiles.logical(scores)
        index = tiles.index(rows, run.cols, scores.device)
        scores = tiles.physical(plan.score((logical,), index, logical.shape))
        if torch.is_grad_enabled():
            scores = scores.clone()  # the in-place masking below must not touch saved tensors
    logical = tiles.logical(scores)
    for part in run.partial:
        cols = slice(part.start - run.cols.start, part.stop - run.cols.start)
        block = logical[..., cols]
        keep = plan.mask((), tiles.index(rows, part, scores.device), block.shape)
        block.masked_fill_(~keep, float("-inf"))
    return scores.mul_(LOG2E)


def _forward(q: Tensor, k: Tensor, v: Tensor, plan: FlexPlan) -> tuple[Tensor, Tensor]:
    """q (B, H, Tq, Dh), k (Bk, Hkv, Tk, Dh), v (Bk, Hkv, Tk, Dv) -> out (B, H, Tq, Dv),
    lse (B, H, Tq) (-inf for a query that may attend no key)."""
    tq = q.shape[2]
    out = q.new_zeros(*q.shape[:3], v.shape[-1])
    lse = q.new_full((*q.shape[:3], 1), float("-inf"))
    for group in plan.groups:
        tiles = _Tiles(group, q, k, v)
        out5, lse5 = tiles.five(out), tiles.five(lse)
        v_ones = torch.cat([tiles.v, tiles.v.new_ones(*tiles.v.shape[:-1], 1)], -1)
        for i, runs in enumerate(group.visits):
            if not runs:
                continue  # a query block that sees no key: output 0, lse -inf
            rows = slice(i * plan.block_rows, min((i + 1) * plan.block_rows, tq))
            qt = tiles.rows_in(tiles.q5, rows) * plan.scale
            row_max, acc = None, None
            for run in runs:
                scores = torch.bmm(qt, tiles.k[:, run.cols].transpose(1, 2))  # (P, M, c)
                scores = _modified_scores(tiles, plan, scores, rows, run)
                new_max = scores.amax(-1, keepdim=True)
                if row_max is not None:
                    new_max = torch.maximum(new_max, row_max)
                # A row with no key allowed yet has max -inf: shift by 0 so exp gives 0, not NaN.
                shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
                probs = scores.sub_(shift).exp2_()
                if acc is None:
                    acc = torch.bmm(probs, v_ones[:, run.cols])
                else:
                    acc.mul_(torch.exp2(row_max - shift)).baddbmm_(probs, v_ones[:, run.cols])
                row_max = new_max
            row_sum = acc[..., -1:]
            tiles.rows_out(acc[..., :-1] / row_sum.clamp(min=torch.finfo(q.dtype).tiny), out5, rows)
            tiles.rows_out(torch.xlogy(1.0, row_sum) + row_max * LN2, lse5, rows)
    return out, lse.squeeze(-1)


def _backward(q, k, v, out, lse, grad_out, grad_lse, plan: FlexPlan, captured):
    """Gradients of q, k, v and of the captured tensors (recomputing every visited tile)."""
    tq = q.shape[2]
    finite_lse = lse.masked_fill(lse == float("-inf"), torch.finfo(q.dtype).max / 4)
    lse2 = (finite_lse * LOG2E).unsqueeze(-1)  # base 2
    delta = ((grad_out * out).sum(-1) - grad_lse).unsqueeze(-1)  # (B, H, Tq, 1)
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    grad_captured = [None] * len(captured)
    for group in plan.groups:
        tiles = _Tiles(group, q, k, v)
        lse5, delta5, grad_out5, grad_q5 = map(tiles.five, (lse2, delta, grad_out, grad_q))
        gk = grad_k[group.kv_batches, group.kv_heads].view(tiles.k.shape)
        gv = grad_v[group.kv_batches, group.kv_heads].view(tiles.v.shape)
        for i, runs in enumerate(group.visits):
            if not runs:
                continue
            rows = slice(i * plan.block_rows, min((i + 1) * plan.block_rows, tq))
            qt = tiles.rows_in(tiles.q5, rows) * plan.scale
            lse_t, delta_t = tiles.rows_in(lse5, rows), tiles.rows_in(delta5, rows)
            do_t = tiles.rows_in(grad_out5, rows)
            dq = None
            for run in runs:
                raw = torch.bmm(qt, tiles.k[:, run.cols].transpose(1, 2))  # (P, M, c)
                if plan.score is not None:
                    raw.requires_grad_()
                    with torch.enable_grad():
                        modified = _modified_scores(tiles, plan, raw, rows, run)
                    probs = modified.detach().sub(lse_t).exp2_()
                else:
                    probs = _modified_scores(tiles, plan, raw, rows, run).sub_(lse_t).exp2_()
                gv[:, run.cols] += torch.bmm(probs.transpose(1, 2), do_t)
                grad_scores = torch.bmm(do_t, tiles.v[:, run.cols].transpose(1, 2))
                grad_scores.sub_(delta_t).mul_(probs)  # dS = P * (dP - delta)
                if plan.score is not None:
                    grad_scores = _through_score_mod(
                        modified, raw, grad_scores, captured, grad_captured
                    )
                dq = torch.bmm(grad_scores, tiles.k[:, run.cols]) if dq is None else (
                    dq.baddbmm_(grad_scores, tiles.k[:, run.cols])
                )  # fmt: skip
                gk[:, run.cols] += torch.bmm(grad_scores.transpose(1, 2), qt)
            tiles.rows_out(dq * plan.scale, grad_q5, rows)
    return grad_q, grad_k, grad_v, grad_captured


def _through_score_mod(modified, raw, grad_scores, captured, grad_captured) -> Tensor:
    """dS (w.r.t. the modified, base-e scores) -> dS_raw, adding captured tensors' grads."""
    # modified is in base 2 (LOG2E * s'), P was built from it: dL/d(modified) = dS / LOG2E.
    inputs = [raw, *captured]
    grads = torch.autograd.grad(modified, inputs, grad_scores / LOG2E, allow_unused=True)
    for n, grad in enumerate(grads[1:]):
        if grad is not None:
            grad_captured[n] = grad if grad_captured[n] is None else grad_captured[n] + grad
    return grads[0]


class FlexAttentionFunction(torch.autograd.Function):
    """(query, key, value, plan, *captured) -> (output, lse).

    Shapes: query (B, H, Tq, Dh); key (Bk, Hkv, Tk, Dh), value (Bk, Hkv, Tk, Dv) with Bk in
    {1, B}, Hkv dividing H; one float dtype (float32 or float64).  ``captured``: tensors
    the score_mod reads that require grad (they get their gradients)."""

    @staticmethod
    def forward(ctx, query, key, value, plan, *captured):
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        output, lse = _forward(query, key, value, plan)
        ctx.save_for_backward(query, key, value, output, lse, *captured)
        ctx.plan = plan
        return output, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output, grad_lse):
        query, key, value, output, lse, *captured = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_captured = _backward(
            query, key, value, output, lse, grad_output.contiguous(), grad_lse, ctx.plan, captured
        )
        return grad_q, grad_k, grad_v, None, *grad_captured
