"""Exact attention in tiles: an online softmax forward and a backward that recomputes.

The (B, H, Tq, Tk) score matrix is cut into tiles of (heads, query rows, key columns) and
never held whole.  For each query row i the forward walks the key blocks J and keeps a
running max m_i and running sums (the online softmax of Milakov & Gimelshein 2018, as in
FlashAttention), with scores s_ij = scale * q_i . k_j (+ bias):

    m_i'   = max(m_i, max_{j in J} s_ij)
    acc_i' = acc_i * exp(m_i - m_i') + sum_{j in J} exp(s_ij - m_i') [v_j, 1]

and at the end  out_i = acc_i[:Dv] / acc_i[Dv],  lse_i = m_i + log acc_i[Dv]  (acc_i[Dv] is
the softmax normaliser l_i).  It saves only the output and lse; the backward recomputes each
tile's weights P_ij = exp(s_ij - lse_i).  Memory besides the inputs is O(T).

Speed on a CPU comes from large tiles batched over heads and few elementwise passes; the
tricks are marked where they happen:
- *base 2*: log2(e) folded into the scale once, so every exp is an ``exp2`` (cheaper, and
  unlike ``exp``/``log`` it starts no thread team for small per-row tensors: each parallel
  region costs a scheduler slice on a busy machine); m is in base 2, lse = ln(2) m + ln l.
- *appended column*: ones appended to v make ``P @ [v, 1]`` give the weighted values and
  l in one matmul; backward, ``[q, -lse] . [k, 1]`` and ``[dO, -delta] . [v, 1]`` fold two
  subtractions per tile into the matmuls.
- *reused buffers*: one flat tile buffer per call, viewed to each tile, written in place.
- *causal skip*: key blocks entirely above the (end-aligned) diagonal are never computed.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .chunked_tiles import (
    LN2,
    LOG2E,
    TileWorkspace,
    _accumulate,
    _flat,
    _Group,
    _key_blocks,
    _Mask,
    _Options,
    _scratch,
    _tile,
    _with_ones,
)

__all__ = [
    "ChunkedAttentionFunction",
    "TileWorkspace",
    "compute_dtype",
    "tile_forward",
    "tile_backward",
]

#: Scores per tile (32 MiB in float32): big matmuls and few ops; each op is a parallel region,
#: which on a busy machine costs a scheduler slice, so fewer, larger tiles are faster there.
TILE_ELEMENTS = 1 << 23


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernel works in: half precisions accumulate in float32."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _head_groups(batch: int, heads: int, tile_rows: int, tile_cols: int) -> list[_Group]:
    """Group (batch, head) pairs so one tile holds about TILE_ELEMENTS scores.  A group is
    whole batches of all heads, or some heads of one batch, so (B, H, T, D) tensors sliced
    to it merge their first two dims into a view."""
    per_head = tile_rows * tile_cols
    if per_head * heads <= TILE_ELEMENTS:
        step = max(1, TILE_ELEMENTS // (per_head * heads))
        return [
            _Group(
                slice(b, min(b + step, batch)), slice(0, heads), (min(b + step, batch) - b) * heads
            )
            for b in range(0, batch, step)
        ]
    step = max(1, TILE_ELEMENTS // per_head)
    return [
        _Group(slice(b, b + 1), slice(h, min(h + step, heads)), min(h + step, heads) - h)
        for b in range(batch)
        for h in range(0, heads, step)
    ]


def _forward(
    q: Tensor, k: Tensor, v: Tensor, options: _Options, workspace: TileWorkspace | None = None
) -> tuple[Tensor, Tensor]:
    """Shapes: q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv) -> out (B, H, Tq, Dv),
    lse (B, H, Tq).  Causal needs Tk >= Tq (checked by the callers)."""
    mask, causal, scale, block = options
    (batch, heads, tq, _), tk = q.shape, k.shape[2]
    bq, bk = min(block, tq), min(block, tk)
    out, lse = q.new_empty(*q.shape[:3], v.shape[-1]), q.new_empty(*q.shape[:3], 1)
    groups = _head_groups(batch, heads, bq, bk)
    buffer = _scratch(workspace, "scores", max(g.size for g in groups) * bq * bk, q)
    for group in groups:
        qs, kg = _flat(q, group) * (scale * LOG2E), _flat(k, group)  # base 2: s * log2(e)
        vg = _with_ones(_flat(v, group))  # appended column: P @ [v, 1] = [P v, l]
        out_g, lse_g = _flat(out, group), _flat(lse, group)
        for q0 in range(0, tq, bq):
            rows = slice(q0, min(q0 + bq, tq))
            row_max = q.new_full((group.size, rows.stop - q0, 1), float("-inf"))  # m_i
            acc = None  # (n, bq, Dv + 1): acc_i = sum_j 2^(s_ij - m_i) [v_j, 1]
            for cols, causal_blocked in _key_blocks(rows, tk, bk, causal, tk - tq, q.device):
                scores = _tile(buffer, group, rows, cols)
                torch.bmm(qs[:, rows], kg[:, cols].transpose(1, 2), out=scores)
                mask.apply(scores, group, rows, cols, causal_blocked)
                new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))  # m_i'
                # A row with no key allowed yet has max -inf: shift by 0 so exp gives 0, not NaN.
                shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
                probs = scores.sub_(shift).exp2_()  # 2^(s_ij - m_i'), in place in the buffer
                if acc is not None:
                    acc.mul_(torch.exp2(row_max - shift))  # acc_i * 2^(m_i - m_i')
                acc = _accumulate(acc, probs, vg[:, cols])  # + sum_j 2^(s_ij - m_i') [v_j, 1]
                row_max = new_max
            # out_i = acc_i[:Dv] / l_i;  a row with no key: l_i = 0 -> output 0, lse = -inf
            row_sum = acc[..., -1:]
            torch.div(
                acc[..., :-1], row_sum.clamp(min=torch.finfo(q.dtype).tiny), out=out_g[:, rows]
            )
            lse_rows = torch.xlogy(1.0, row_sum)  # ln l_i; xlogy, unlike log, runs inline
            torch.add(lse_rows, row_max, alpha=LN2, out=lse_g[:, rows])  # + ln(2) m_i
    return out, lse.squeeze(-1)


def _backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    grad_lse: Tensor,
    options: _Options,
    bias_grad_shape: tuple[int, ...] | None,
    workspace: TileWorkspace | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients for q, k, v (and the float bias if ``bias_grad_shape``), recomputing each
    tile's weights P = exp(s - lse):  dV += P^T dO;  dS = P * (dO V^T - delta + dlse),
    delta = rowsum(dO * O);  dQ += scale * dS K;  dK += scale * dS^T Q."""
    mask, causal, scale, block = options
    (batch, heads, tq, _), tk = q.shape, k.shape[2]
    bq, bk = min(block, tq), min(block, tk)
    # A row with no key has lse = -inf; a huge finite lse makes its weights exp2(-big) = 0.
    lse = lse.masked_fill(lse == float("-inf"), torch.finfo(q.dtype).max / 4).unsqueeze(-1)
    delta = ((grad_out * out).sum(-1) - grad_lse).unsqueeze(-1)  # (B, H, Tq, 1)
    grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    grad_bias = None if bias_grad_shape is None else q.new_zeros(bias_grad_shape)
    groups = _head_groups(batch, heads, bq, bk)
    tile_numel = max(g.size for g in groups) * bq * bk
    probs_buffer = _scratch(workspace, "scores", tile_numel, q)
    grad_buffer = _scratch(workspace, "grad_scores", tile_numel, q)
    for group in groups:
        qs, kg, dog = _flat(q, group) * scale, _flat(k, group), _flat(grad_out, group)
        # appended columns: one matmul gives (s - lse) log2(e) = [q, -lse] log2(e) . [k, 1]
        # (base 2), another dP - delta = [dO, -delta] . [v, 1]: two passes per tile saved.
        qs_lse = torch.cat([qs, -_flat(lse, group)], -1).mul_(LOG2E)
        k_ones = _with_ones(kg)
        do_delta, v_ones = torch.cat([dog, -_flat(delta, group)], -1), _with_ones(_flat(v, group))
        # Per key block, each contiguous (in-place matmuls into strided slices are slow).
        dk_blocks, dv_blocks = [None] * -(-tk // bk), [None] * -(-tk // bk)
        for q0 in range(0, tq, bq):
            rows = slice(q0, min(q0 + bq, tq))
            dq = None  # every block of rows sees at least the first key block
            for cols, causal_blocked in _key_blocks(rows, tk, bk, causal, tk - tq, q.device):
                j = cols.start // bk
                probs = _tile(probs_buffer, group, rows, cols)
                torch.bmm(qs_lse[:, rows], k_ones[:, cols].transpose(1, 2), out=probs)
                mask.apply(probs, group, rows, cols, causal_blocked)
                probs.exp2_()  # P = exp(s - lse), in place in the reused buffer
                dv_blocks[j] = _accumulate(dv_blocks[j], probs.transpose(1, 2), dog[:, rows])
                grad_scores = _tile(grad_buffer, group, rows, cols)
                torch.bmm(do_delta[:, rows], v_ones[:, cols].transpose(1, 2), out=grad_scores)
                grad_scores.mul_(probs)  # dS = P * (dP - delta)
                dq = _accumulate(dq, grad_scores, kg[:, cols])
                dk_blocks[j] = _accumulate(dk_blocks[j], grad_scores.transpose(1, 2), qs[:, rows])
                if grad_bias is not None:
                    _add_bias_grad(grad_bias, grad_scores, group, rows, cols)
            torch.mul(dq, scale, out=_flat(grad_q, group)[:, rows])
        # every key block was seen: at least by the last rows, which see every key
        torch.cat(dk_blocks, dim=1, out=_flat(grad_k, group))
        torch.cat(dv_blocks, dim=1, out=_flat(grad_v, group))
    return grad_q, grad_k, grad_v, grad_bias


def _add_bias_grad(
    grad_bias: Tensor, grad_scores: Tensor, group: _Group, rows: slice, cols: slice
) -> None:
    """Sum one tile of dS (n, bq, bk) into the bias gradient over the bias's broadcast dims."""
    tile = grad_scores.view(-1, group.heads.stop - group.heads.start, *grad_scores.shape[1:])
    spans = (group.batches, group.heads, rows, cols)
    broadcast = [d for d in range(4) if grad_bias.shape[d] == 1 and tile.shape[d] > 1]
    if broadcast:
        tile = tile.sum(broadcast, keepdim=True)
    index = tuple(slice(0, 1) if grad_bias.shape[d] == 1 else spans[d] for d in range(4))
    grad_bias[index] += tile


def tile_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    block_size: int,
    workspace: TileWorkspace | None = None,
) -> tuple[Tensor, Tensor]:
    """The kernel's forward without autograd, for callers that merge partial results through
    lse (ring attention).  Shapes and dtypes as :class:`ChunkedAttentionFunction` (all heads,
    contiguous or not) -> output (B, H, Tq, Dv), lse (B, H, Tq).  ``workspace``: tile
    buffers kept between the calls of one caller."""
    query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    shape = (*query.shape[:3], key.shape[2])
    options = _Options(_Mask.of(mask, shape), causal, scale, block_size)
    return _forward(query, key, value, options, workspace)


def tile_backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    output: Tensor,
    lse: Tensor,
    grad_output: Tensor,
    mask: Tensor | None,
    causal: bool,
    scale: float,
    block_size: int,
    workspace: TileWorkspace | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of q, k, v for one block of keys, given the *whole* attention's ``output``
    and ``lse`` (over every key, of which ``key`` is a part): the weights recomputed as
    exp(s - lse) are then the true ones, so the parts of dK, dV over key blocks are exact
    and dQ sums over them.  No gradient flows into lse.  Shapes as :func:`tile_forward`."""
    query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    shape = (*query.shape[:3], key.shape[2])
    options = _Options(_Mask.of(mask, shape), causal, scale, block_size)
    grad_lse = lse.new_zeros(())
    grad_q, grad_k, grad_v, _ = _backward(
        query,
        key,
        value,
        output.contiguous(),
        lse,
        grad_output.contiguous(),
        grad_lse,
        options,
        None,
        workspace,
    )
    return grad_q, grad_k, grad_v


class ChunkedAttentionFunction(torch.autograd.Function):
    """(query, key, value, mask, causal, scale, block_size) -> (output, lse).

    Shapes: query (B, H, Tq, Dh), key (B, H, Tk, Dh), value (B, H, Tk, Dv), all one float
    dtype (float32 or float64; callers promote half precisions); mask None, bool (True =
    may attend) or a float bias in that dtype, broadcastable to (B, H, Tq, Tk) -> output
    (B, H, Tq, Dv), lse (B, H, Tq) (-inf for a row with no key allowed).  Causal needs
    Tk >= Tq (:func:`~qkv.functional.checks.check_causal`)."""

    @staticmethod
    def forward(ctx, query, key, value, mask, causal, scale, block_size):
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        shape = (*query.shape[:3], key.shape[2])
        options = _Options(_Mask.of(mask, shape), causal, scale, block_size)
        output, lse = _forward(query, key, value, options)
        ctx.save_for_backward(query, key, value, mask, output, lse)
        ctx.options = options._replace(mask=None)  # tensors travel via save_for_backward
        return output, lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output, grad_lse):
        query, key, value, mask, output, lse = ctx.saved_tensors
        bias_grad_shape = None
        if mask is not None and mask.is_floating_point() and ctx.needs_input_grad[3]:
            bias_grad_shape = (1,) * (4 - mask.dim()) + tuple(mask.shape)
        grad_output = grad_output.contiguous()
        options = ctx.options._replace(mask=_Mask.of(mask, (*query.shape[:3], key.shape[2])))
        grad_q, grad_k, grad_v, grad_bias = _backward(
            query, key, value, output, lse, grad_output, grad_lse, options, bias_grad_shape
        )
        if grad_bias is not None:
            grad_bias = grad_bias.view(mask.shape)
        return grad_q, grad_k, grad_v, grad_bias, None, None, None
