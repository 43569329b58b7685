"""The "chunked" backend: exact attention in O(T) memory, block by block.

It serves what the fused kernels cannot (or cannot in little memory): additive float
biases such as ALiBi or relative positions -- also *learned* ones, whose gradient it
computes tile by tile where SDPA falls back to its O(T^2) math kernel -- boolean masks,
end-aligned causal masks with Tq != Tk, very long sequences.  The kernel itself is in
:mod:`.chunked_kernel`; this module holds the public functions and the registry entry.

``chunked_attention(..., return_lse=True)`` also returns the softmax normaliser
``lse_i = log sum_j exp(s_ij)``, from which :func:`weights_from_lse` recomputes the exact
weights of a few query rows or heads on demand, without the (B, H, Tq, Tk) matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..checks import check_causal, check_mask, check_tensors
from ..heads import repeat_kv
from ..scores import resolve_scale
from . import AttentionCall, AttentionOutput, make_call, register_backend
from .chunked_kernel import ChunkedAttentionFunction, compute_dtype

__all__ = ["ChunkedBackend", "chunked_attention", "weights_from_lse", "DEFAULT_BLOCK_SIZE"]

#: Query rows and key columns per tile.  Large tiles keep the matmuls efficient.
DEFAULT_BLOCK_SIZE = 1024


def chunked_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """z_i = sum_j alpha_ij v_j with alpha_ij = softmax_j(scale * q_i . k_j + bias_ij), exact,
    computed in tiles of ``block_size`` query rows x ``block_size`` keys (online softmax),
    with a backward that recomputes each tile instead of storing the weights.

    Shapes:
        query (B, H, Tq, Dh); key (B, Hkv, Tk, Dh); value (B, Hkv, Tk, Dv), Hkv dividing H.
        Returns output (B, H, Tq, Dv), or ``(output, lse)`` with lse (B, H, Tq) if
        ``return_lse``.  lse is float32 for half-precision inputs (which are computed in
        float32), -inf for a query that may attend no key, and differentiable.

    Args:
        mask: boolean (True = may attend) or a float additive bias (-inf blocks a key),
            broadcastable to (B, H, Tq, Tk); it is sliced per tile, never expanded.  A float
            bias that requires grad gets its gradient.
        causal: end-aligned: query i sees key j iff j <= i + (Tk - Tq).  Key blocks
            entirely above the diagonal are skipped.
        scale: the factor on q . k; default 1 / sqrt(Dh).
        block_size: query rows and keys per tile (heads are batched up to about 8M scores).

    A query whose every key is masked gets output 0 and zero gradients, never NaN.
    """
    call = make_call(query, key, value, mask, causal, "scaled_dot", scale, 0.0, False)
    call = call.repeated_heads()
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be a positive int (e.g. 1024)")
    output, lse = _run(call, block_size)
    return (output, lse) if return_lse else output


def _run(call: AttentionCall, block_size: int) -> tuple[Tensor, Tensor]:
    """A validated call (causal with Tk >= Tq, key/value heads repeated), in tiles of
    ``block_size`` -> (output (B, H, Tq, Dv) in the query's dtype, lse (B, H, Tq))."""
    dtype = compute_dtype(call.query.dtype)
    args = [t.to(dtype) for t in (call.query, call.key, call.value)]
    mask = call.mask
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    output, lse = ChunkedAttentionFunction.apply(*args, mask, call.causal, call.scale, block_size)
    return output.to(call.query.dtype), lse


def weights_from_lse(
    query: Tensor,
    key: Tensor,
    lse: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    rows: Sequence[int] | Tensor | None = None,
    heads: Sequence[int] | Tensor | None = None,
) -> Tensor:
    """The exact weights alpha_ij = exp(s_ij - lse_i) of chosen query rows and heads,
    recomputed from the normaliser ``chunked_attention(..., return_lse=True)`` gave.

    Pass the same ``mask``, ``causal`` and ``scale`` as to :func:`chunked_attention`.
    Masked keys get weight 0; a query that may attend no key (lse = -inf) gets all zeros.

    Shapes:
        query (B, H, Tq, Dh); key (B, Hkv, Tk, Dh); lse (B, H, Tq) -> weights
        (B, len(heads), len(rows), Tk); ``rows``/``heads`` default to all.  The weights are
        in the query's dtype.
    """
    check_tensors(query, key, key)
    mask = check_mask(mask, query, key)
    batch, num_heads, tq, _ = query.shape
    tk = key.shape[2]
    if lse.shape != (batch, num_heads, tq):
        raise ValueError(
            f"lse has shape {tuple(lse.shape)}; expected (B, H, Tq) = {(batch, num_heads, tq)}"
        )
    check_causal(causal, tq, tk)
    scale = resolve_scale("scaled_dot", scale, query.shape[-1])
    row_index = _indices(rows, tq, "rows", query.device)
    head_index = _indices(heads, num_heads, "heads", query.device)
    dtype = compute_dtype(query.dtype)
    key = repeat_kv(key, num_heads // key.shape[1]).index_select(1, head_index).to(dtype)
    chosen = query.index_select(1, head_index).index_select(2, row_index).to(dtype)
    scores = (chosen @ key.transpose(-2, -1)) * scale  # (B, h, r, Tk)
    if mask is not None:
        mask = (
            mask.expand(batch, num_heads, tq, tk)
            .index_select(1, head_index)
            .index_select(2, row_index)
        )
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(dtype)
    if causal:
        keep = torch.arange(tk, device=query.device)[None, :] <= row_index[:, None] + (tk - tq)
        scores = scores.masked_fill(~keep, float("-inf"))
    norm = lse.index_select(1, head_index).index_select(2, row_index).to(dtype)[..., None]
    norm = norm.masked_fill(norm == float("-inf"), float("inf"))  # rows with no key: weights 0
    return (scores - norm).exp().to(query.dtype)


def _indices(
    chosen: Sequence[int] | Tensor | None, size: int, name: str, device: torch.device
) -> Tensor:
    """Row or head numbers (negative count from the end) as a 1-D long tensor."""
    if chosen is None:
        return torch.arange(size, device=device)
    index = torch.as_tensor(chosen, device=device).reshape(-1)
    if index.dtype in (torch.bool,) or index.is_floating_point() or index.is_complex():
        raise TypeError(f"{name} must be integers, got dtype {index.dtype}")
    if index.numel() and (index.min() < -size or index.max() >= size):
        raise ValueError(f"{name}={index.tolist()} out of range for size {size}")
    return index.long() % size


class ChunkedBackend:
    """Exact, O(T) memory, any mask or bias; no dropout, no weights."""

    name = "chunked"

    def unsupported(self, call: AttentionCall) -> str | None:
        if call.dropout > 0:
            return "dropout not supported by the chunked kernel"
        if call.need_weights:
            return (
                "need_weights: use reference, or chunked_attention(..., return_lse=True) "
                "+ weights_from_lse"
            )
        return None

    def run(self, call: AttentionCall) -> AttentionOutput:
        output, _ = _run(call, DEFAULT_BLOCK_SIZE)
        return AttentionOutput(output, None)


register_backend(ChunkedBackend(), priority=50)
