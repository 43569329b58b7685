"""flex_attention: PyTorch's FlexAttention call, trained on the CPU at the cost of what it attends.

The same arguments and meaning as ``torch.nn.attention.flex_attention.flex_attention``, so
user code ports by changing one import; the tile kernel is in
:mod:`.backends.flex_kernel`, the block masks in :mod:`.block_mask`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from .backends.chunked_kernel import compute_dtype
from .backends.flex_kernel import FlexAttentionFunction, plan_flex
from .backends.sdpa import keep_nan_rows
from .block_mask import BlockMask, noop_mask
from .captures import TensorReads
from .mask_mods import ModEvaluator, index_range
from .scores import resolve_scale

__all__ = ["flex_attention"]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

#: Tile of a call without a block mask (every block full: no mask is evaluated).
UNMASKED_BLOCK = 256
#: Query and key positions of the tile on which a score_mod is first watched for the
#: tensors it reads (every batch and head).
PROBE_POSITIONS = 8


def flex_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    score_mod: ScoreMod | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """out_i = sum_j softmax_j(s_ij) v_j with s_ij = score_mod(scale * q_i . k_j, b, h, i, j)
    where the block mask (and its mask_mod) allows (i, j), else -inf.

    Shapes:
        query (B, H, Tq, Dh); key (Bk, Hkv, Tk, Dh); value (Bk, Hkv, Tk, Dv); Bk is B or 1
        (one key/value batch serving every query batch); Hkv = H, or dividing H with
        ``enable_gqa=True`` (key/value heads are not repeated in memory).  Returns output
        (B, H, Tq, Dv) in the query's dtype, and with ``return_lse`` also lse (B, H, Tq),
        log sum_j exp(s_ij), float32 for half precisions, -inf for a fully masked query.

    Args:
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score``, written for one element (it is
            evaluated on a tile at a time: on broadcast index tensors, or under vmap when
            that would not be elementwise).  Tensors it captures that require grad get
            their gradients, however it reaches them (:mod:`.captures`).
        block_mask: from :func:`~qkv.functional.block_mask.create_block_mask` for exactly
            (B or 1, H or 1, Tq, Tk).  Empty blocks are skipped forward and backward; full
            blocks apply no mask; partial blocks evaluate its ``mask_mod`` on the tile.
        scale: the factor on q . k; default 1 / sqrt(Dh).

    A query that may attend no key gets output 0 (and zero gradients), never NaN.
    float32 and float64 compute as themselves; bfloat16/float16 accumulate in float32.

    A dense pattern -- no block mask, or one that is exactly the causal triangle -- with no
    score_mod and no lse asked for runs on PyTorch's fused kernel, whose ``is_causal`` skips
    the upper blocks just as the tile kernel would, in one C++ call instead of a Python walk
    over tiles.
    """
    _check_inputs(query, key, value, enable_gqa)
    if block_mask is not None:
        _check_block_mask(block_mask, query, key)
    scale = resolve_scale("scaled_dot", scale, query.shape[-1])
    dense = _dense_pattern(query, key, score_mod, block_mask, return_lse)
    if dense is not None:
        output = F.scaled_dot_product_attention(
            query, key, value, is_causal=dense == "causal", scale=scale, enable_gqa=enable_gqa
        )
        return keep_nan_rows(output, query)
    tq, tk = query.shape[2], key.shape[2]
    if block_mask is None:
        block = (min(tq, UNMASKED_BLOCK), min(tk, UNMASKED_BLOCK))
        full = torch.ones(1, 1, -(-tq // block[0]), -(-tk // block[1]), dtype=torch.bool)
        block_mask = BlockMask.from_dense_blocks(
            torch.zeros_like(full), full, (tq, tk), block, noop_mask
        )
    if score_mod is not None and not callable(score_mod):
        raise InputError(f"score_mod must be a function or None, got {type(score_mod).__name__}")
    plan = plan_flex(block_mask, (query.shape, key.shape), scale, score_mod)
    dtype = compute_dtype(query.dtype)
    captured = []
    if score_mod is not None and torch.is_grad_enabled():
        captured = _score_mod_reads(score_mod, query, key, dtype)
        plan.score.watch = frozenset(map(id, captured))
    output, lse = FlexAttentionFunction.apply(
        query.to(dtype), key.to(dtype), value.to(dtype), plan, *captured
    )
    output = output.to(query.dtype)
    return (output, lse) if return_lse else output


def _dense_pattern(query, key, score_mod, block_mask, return_lse) -> str | None:
    """ "all" (no block mask) or "causal" where the fused kernel computes the same call,
    else None (the tile kernel): float32/float64, one key batch per query batch, no
    score_mod, no lse."""
    if score_mod is not None or return_lse or query.dtype not in (torch.float32, torch.float64):
        return None
    if key.shape[0] != query.shape[0]:
        return None
    if block_mask is None:
        return "all"
    return "causal" if block_mask.is_causal(query.shape[0], query.shape[1]) else None


def _check_inputs(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.dim() != 4 or not t.is_floating_point():
            raise InputError(f"{name} must be a floating (B, H, T, D) tensor, got {_describe(t)}")
    if not (query.dtype == key.dtype == value.dtype) or not (
        query.device == key.device == value.device
    ):
        raise InputError("query, key and value need one dtype and one device")
    (b, h, tq, dh), (bk, hk, tk, dk), (bv, hv, tv, _) = query.shape, key.shape, value.shape
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if bk != bv or bk not in (1, b):
        raise InputError(f"key/value batch must be the query's or 1: {shapes}")
    if hk != hv or tk != tv or dh != dk or not (tq and tk):
        raise InputError(f"key and value need matching heads and lengths, Dh the query's: {shapes}")
    if hk != h and not enable_gqa:
        raise InputError(f"query has {h} heads, key/value {hk}: pass enable_gqa=True for GQA")
    if h % hk:
        raise InputError(f"key/value heads ({hk}) must divide query heads ({h}): {shapes}")


def _check_block_mask(block_mask: BlockMask, query: Tensor, key: Tensor) -> None:
    if not isinstance(block_mask, BlockMask):
        raise InputError(
            f"block_mask must be a qkv BlockMask (qkv.create_block_mask), got "
            f"{type(block_mask).__name__}"
        )
    (b, h, tq, _), tk = query.shape, key.shape[2]
    mask_b, mask_h = block_mask.shape[:2]
    if tuple(block_mask.seq_lengths) != (tq, tk) or mask_b not in (1, b) or mask_h not in (1, h):
        raise InputError(
            f"block_mask was built for (B, H, Q_LEN, KV_LEN) = {block_mask.shape} but the call "
            f"is {(b, h, tq, tk)}: build it again with create_block_mask(mask_mod, {b}, {h}, "
            f"{tq}, {tk}) (B or H may be None to broadcast)"
        )
    if block_mask.kv_num_blocks.device != query.device:
        raise InputError(
            f"block_mask is on {block_mask.kv_num_blocks.device}, query on {query.device}: "
            "pass device= to create_block_mask"
        )


def _score_mod_reads(score_mod: ScoreMod, query: Tensor, key: Tensor, dtype) -> list[Tensor]:
    """The tensors requiring grad that ``score_mod`` reads (:mod:`.captures`), seen on a
    small tile of every batch and head: they become inputs of the kernel's autograd node."""
    (batch, heads, tq, _), tk = query.shape, key.shape[2]
    rows, cols = min(tq, PROBE_POSITIONS), min(tk, PROBE_POSITIONS)
    device = query.device
    index = (
        index_range(0, batch, device).view(-1, 1, 1, 1),
        index_range(0, heads, device).view(1, -1, 1, 1),
        index_range(0, rows, device).view(1, 1, -1, 1),
        index_range(0, cols, device).view(1, 1, 1, -1),
    )
    shape = (batch, heads, rows, cols)
    scores = torch.zeros(shape, dtype=dtype, device=device)
    evaluate = ModEvaluator(score_mod, "score_mod")
    evaluate.reads = TensorReads(score_mod)
    evaluate((scores,), index, shape)
    return list(evaluate.reads.found.values())


def _describe(t: object) -> str:
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
