"""flex_attention: PyTorch's FlexAttention call, trained on the CPU at the cost of what it attends.

The same arguments and meaning as ``torch.nn.attention.flex_attention.flex_attention``, so
user code ports by changing one import: this module offers the names that one does
(``flex_attention``, ``create_block_mask``, ``create_mask``, ``BlockMask``, ``and_masks``,
``or_masks``, ``noop_mask``, ``AuxRequest``, ``AuxOutput``), and takes PyTorch's own
``BlockMask`` objects as they are.  The tile kernel is in :mod:`.backends.flex_kernel`, the
block masks in :mod:`.block_mask`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import InputError
from .backends.chunked_kernel import compute_dtype
from .backends.flex_kernel import FlexAttentionFunction, plan_flex
from .backends.sdpa import keep_nan_rows
from .block_mask import (
    BlockMask,
    and_masks,
    as_block_mask,
    create_block_mask,
    create_mask,
    noop_mask,
    or_masks,
    sliced_mask_mod,
)
from .captures import TensorReads
from .mask_mods import ModEvaluator, index_range
from .scores import resolve_scale

__all__ = [
    "flex_attention",
    "flex_engine",
    "AuxRequest",
    "AuxOutput",
    "FlexRuntimeError",
    "BlockMask",
    "create_block_mask",
    "create_mask",
    "and_masks",
    "or_masks",
    "noop_mask",
]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

#: Tile of a call without a block mask (every block full: no mask is evaluated).
UNMASKED_BLOCK = 256
#: Query and key positions of the tile on which a score_mod is first watched for the
#: tensors it reads (every batch and head).
PROBE_POSITIONS = 8


class AuxRequest(NamedTuple):
    """Which auxiliary outputs :func:`flex_attention` returns (PyTorch's fields)."""

    lse: bool = False
    max_scores: bool = False


class AuxOutput(NamedTuple):
    """The auxiliary outputs asked for, None where not.  Shapes: lse, max_scores (B, H, Tq)."""

    lse: Tensor | None = None
    max_scores: Tensor | None = None


class FlexRuntimeError(InputError, RuntimeError):
    """A mistake PyTorch's FlexAttention answers with a RuntimeError (tensors and block mask
    on different devices, a sliced mask's mask_mod, conflicting kernel options)."""


class FlexNotImplementedError(InputError, NotImplementedError):
    """A call PyTorch's FlexAttention does not implement either (its exception type)."""


#: PyTorch's kernel backends (``kernel_options["BACKEND"]``); the CPU runs qkv's tile kernel
#: whichever is named.
BACKENDS = ("AUTO", "TRITON", "FLASH", "TRITON_DECODE")


def flex_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    score_mod: ScoreMod | None = None,
    block_mask: BlockMask | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    return_lse: bool = False,
    kernel_options: dict | None = None,
    *,
    return_aux: AuxRequest | None = None,
) -> Tensor | tuple[Tensor, Tensor] | tuple[Tensor, AuxOutput]:
    """out_i = sum_j softmax_j(s_ij) v_j with s_ij = score_mod(scale * q_i . k_j, b, h, i, j)
    where the block mask (and its mask_mod) allows (i, j), else -inf.  PyTorch's
    ``torch.nn.attention.flex_attention.flex_attention``, every argument with its meaning,
    and on the CPU it trains.

    Shapes:
        query (B, H, Tq, Dh); key (Bk, Hkv, Tk, Dh); value (Bk, Hkv, Tk, Dv); Bk is B or 1
        (one key/value batch serving every query batch); Hkv = H, or dividing H with
        ``enable_gqa=True`` (key/value heads are not repeated in memory).  Returns output
        (B, H, Tq, Dv) in the query's dtype; with ``return_lse`` also lse (B, H, Tq),
        log sum_j exp(s_ij), float32 for half precisions, -inf for a fully masked query;
        with ``return_aux`` an :class:`AuxOutput` (PyTorch's, for PyTorch's request) instead.

    Args:
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score``, written for one element (it is
            evaluated on a tile at a time: on broadcast index tensors, or under vmap when
            that would not be elementwise).  Tensors it captures that require grad get
            their gradients, however it reaches them (:mod:`.captures`).
        block_mask: qkv's or PyTorch's BlockMask (from either ``create_block_mask`` or
            ``BlockMask.from_kv_blocks``; PyTorch's is read from its block lists, once per
            mask object) for exactly (B or 1, H or 1, Tq, Tk).  Empty blocks are skipped
            forward and backward; full blocks apply no mask; partial blocks evaluate its
            ``mask_mod`` on the tile.
        scale: the factor on q . k; default 1 / sqrt(Dh).
        kernel_options: PyTorch's GPU kernel settings: any key is accepted and ignored on
            the CPU (qkv's tile kernel has no such knobs); ``BACKEND`` is checked as
            PyTorch checks it.  On CUDA they go to PyTorch's kernel.
        return_aux: ``AuxRequest(lse=..., max_scores=...)`` (qkv's or PyTorch's);
            max_scores is max_j s_ij (-inf for a fully masked query), without a gradient.
            Not together with ``return_lse`` (ValueError, as PyTorch).

    A query that may attend no key gets output 0 (and zero gradients), never NaN.
    float32 and float64 compute as themselves; bfloat16/float16 accumulate in float32.
    On a CUDA device the call goes to PyTorch's compiled FlexAttention, the engine there.

    A dense pattern -- no block mask, or one that is exactly the causal triangle -- with no
    score_mod and no lse asked for runs on PyTorch's fused kernel, whose ``is_causal`` skips
    the upper blocks just as the tile kernel would, in one C++ call instead of a Python walk
    over tiles.
    """
    _check_inputs(query, key, value, enable_gqa)
    want_lse, want_max = _check_options(kernel_options, return_lse, return_aux)
    if block_mask is not None:
        torch_mask = block_mask
        block_mask = as_block_mask(block_mask)
        if block_mask is not None:
            _check_block_mask(block_mask, query, key)
        if query.device.type == "cuda":
            return _on_cuda(query, key, value, score_mod, torch_mask, scale, enable_gqa,
                            return_lse, kernel_options, return_aux)  # fmt: skip
    elif query.device.type == "cuda":
        return _on_cuda(query, key, value, score_mod, None, scale, enable_gqa,
                        return_lse, kernel_options, return_aux)  # fmt: skip
    if score_mod is not None and not callable(score_mod):
        raise InputError(f"score_mod must be a function or None, got {type(score_mod).__name__}")
    scale = resolve_scale("scaled_dot", scale, query.shape[-1])
    dense = _dense_pattern(query, key, score_mod, block_mask, want_lse or want_max)
    if dense is not None:
        output = F.scaled_dot_product_attention(
            query, key, value, is_causal=dense == "causal", scale=scale, enable_gqa=enable_gqa
        )
        return _results(keep_nan_rows(output, query), None, None, return_lse, return_aux)
    tq, tk = query.shape[2], key.shape[2]
    if block_mask is None:
        block = (min(tq, UNMASKED_BLOCK), min(tk, UNMASKED_BLOCK))
        full = torch.ones(1, 1, -(-tq // block[0]), -(-tk // block[1]), dtype=torch.bool)
        block_mask = BlockMask.from_dense_blocks(
            torch.zeros_like(full), full, (tq, tk), block, noop_mask
        )
    plan = plan_flex(block_mask, (query.shape, key.shape), scale, score_mod)
    dtype = compute_dtype(query.dtype)
    captured = []
    if score_mod is not None and torch.is_grad_enabled():
        captured = _score_mod_reads(score_mod, query, key, dtype)
        plan.score.watch = frozenset(map(id, captured))
    output, lse, max_scores = FlexAttentionFunction.apply(
        query.to(dtype), key.to(dtype), value.to(dtype), plan, *captured
    )
    return _results(output.to(query.dtype), lse, max_scores, return_lse, return_aux)


def _results(output, lse, max_scores, return_lse: bool, return_aux):
    """The output, and what was asked for beside it, in PyTorch's form (its AuxOutput for
    its AuxRequest)."""
    if return_aux is None:
        return (output, lse) if return_lse else output
    kind = AuxOutput
    if type(return_aux).__module__ == "torch.nn.attention.flex_attention":
        kind = _torch_aux_output()
    return output, kind(
        lse=lse if return_aux.lse else None,
        max_scores=max_scores if return_aux.max_scores else None,
    )


def _torch_aux_output() -> type:
    from torch.nn.attention.flex_attention import AuxOutput as TorchAuxOutput

    return TorchAuxOutput


def _check_options(kernel_options, return_lse: bool, return_aux) -> tuple[bool, bool]:
    """(lse wanted, max_scores wanted), raising where PyTorch raises, with its types."""
    options = {} if kernel_options is None else dict(kernel_options)
    if "BACKEND" in options and options.get("FORCE_USE_FLEX_ATTENTION", False):
        raise FlexRuntimeError(
            "kernel_options: BACKEND cannot be combined with the legacy "
            "FORCE_USE_FLEX_ATTENTION; drop FORCE_USE_FLEX_ATTENTION"
        )
    if "BACKEND" in options and options["BACKEND"] not in BACKENDS:
        raise InputError(
            f"kernel_options: invalid BACKEND value {options['BACKEND']!r}; must be one of "
            f"{BACKENDS}"
        )
    for internal in ("OUTPUT_LOGSUMEXP", "OUTPUT_MAX"):
        if internal in options:
            raise AssertionError(f"{internal} must not be in kernel_options (it is set internally)")
    if return_aux is not None and not (
        hasattr(return_aux, "lse") and hasattr(return_aux, "max_scores")
    ):
        raise InputError(
            f"return_aux must be an AuxRequest(lse=..., max_scores=...), got {return_aux!r}"
        )
    if return_lse and return_aux is not None:
        raise InputError(
            "Cannot specify both return_lse and return_aux: use return_aux=AuxRequest(lse=True)"
        )
    want_max = return_aux is not None and bool(return_aux.max_scores)
    if want_max and options.get("BACKEND") == "FLASH":
        raise FlexNotImplementedError(
            "Returning max scores is not supported with BACKEND='FLASH' (as in PyTorch); "
            "drop max_scores or the BACKEND"
        )
    want_lse = return_lse or (return_aux is not None and bool(return_aux.lse))
    return want_lse, want_max


_COMPILED = {}


def flex_engine(device: torch.device | str) -> str:
    """What computes :func:`flex_attention` on ``device`` (``explain_backend`` says it)."""
    if torch.device(device).type == "cuda":
        return "PyTorch's compiled FlexAttention (torch.compile of torch's flex_attention)"
    return "qkv's block-sparse tile kernel (empty blocks skipped, forward and backward)"


def _on_cuda(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse,
             kernel_options, return_aux):  # fmt: skip
    """The call on PyTorch's compiled FlexAttention (the engine on CUDA): a qkv BlockMask is
    handed over as PyTorch's, built from the same block lists and mask_mod."""
    from torch.nn.attention import flex_attention as torch_flex

    if isinstance(block_mask, BlockMask):
        block_mask = torch_flex.BlockMask(
            *block_mask.as_tuple(flatten=False)[:9], BLOCK_SIZE=tuple(block_mask.BLOCK_SIZE),
            mask_mod=block_mask.mask_mod,
        )  # fmt: skip
    if "compiled" not in _COMPILED:
        # compiled once per process; shapes that change (decoding) recompile as dynamic ones
        _COMPILED["compiled"] = torch.compile(torch_flex.flex_attention)
    kwargs = {} if return_aux is None else {"return_aux": return_aux}
    return _COMPILED["compiled"](
        query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse,
        kernel_options, **kwargs,
    )  # fmt: skip


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
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise InputError(f"{name} must be a floating (B, H, T, D) tensor, got {_describe(t)}")
    if query.device != key.device or query.device != value.device:
        raise FlexRuntimeError(
            f"query, key and value must be on one device, got {query.device}, {key.device}, "
            f"{value.device}"
        )
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise FlexNotImplementedError(
            f"query, key and value must be 4-D (B, H, T, D) tensors, got "
            f"{_describe(query)}, {_describe(key)}, {_describe(value)}"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise InputError(
            f"query, key and value need one dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    (b, h, tq, dh), (bk, hk, tk, dk), (bv, hv, tv, _) = query.shape, key.shape, value.shape
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if dh != dk:
        raise InputError(
            f"query and key must share the embedding dimension, got E={dh} and E={dk}: {shapes}"
        )
    if bk != bv or bk not in (1, b):
        raise InputError(f"key/value batch must be the query's or 1: {shapes}")
    if hk != hv or tk != tv or not (tq and tk):
        raise InputError(f"key and value need matching heads and lengths: {shapes}")
    if hk != h and not enable_gqa:
        raise InputError(
            f"query has {h} heads and key/value {hk}: pass enable_gqa=True for grouped-query "
            "attention"
        )
    if h % hk:
        raise InputError(f"key/value heads ({hk}) must divide query heads ({h}): {shapes}")


def _check_block_mask(block_mask: BlockMask, query: Tensor, key: Tensor) -> None:
    if block_mask.mask_mod is sliced_mask_mod:
        raise FlexRuntimeError(
            "Cannot use mask_mod from a sliced BlockMask: set it from the original mask's, "
            "shifted to the sliced rows, e.g. step.mask_mod = lambda b, h, q, kv: "
            "mask.mask_mod(b, h, q + offset, kv)"
        )
    (b, h, tq, _), tk = query.shape, key.shape[2]
    mask_q, mask_k = block_mask.seq_lengths
    if (tq, tk) != (mask_q, mask_k):
        hint = (
            "build a new block mask for the longer call"
            if tq > mask_q or tk > mask_k
            else f"build a new one, or crop it with block_mask._adjust({tq}, {tk}) (right for "
            "masks that do not depend on the length, such as causal or a window)"
        )
        raise InputError(
            f"block_mask was created for block_mask.shape={block_mask.shape} but got "
            f"q_len={tq} and kv_len={tk}: {hint}"
        )
    if block_mask.kv_num_blocks.device != query.device:
        raise FlexRuntimeError(
            f"Expect q/k/v and block_mask to be on the same device but got {query.device} and "
            f"{block_mask.kv_num_blocks.device}: move it with block_mask.to({str(query.device)!r})"
        )
    partial, _ = block_mask.dense_blocks()
    mask_b, mask_h, rows = partial.shape[0], partial.shape[1], partial.shape[2]
    if partial.dim() != 4 or mask_b not in (1, b) or mask_h not in (1, h):
        raise InputError(
            f"block_mask was built for (B, H, Q_LEN, KV_LEN) = {block_mask.shape} but the call "
            f"is {(b, h, tq, tk)}: build it again with create_block_mask(mask_mod, {b}, {h}, "
            f"{tq}, {tk}) (B or H may be None to broadcast)"
        )
    if rows < -(-tq // block_mask.BLOCK_SIZE[0]):
        raise InputError(
            f"block_mask lists {rows} query-block rows of {block_mask.BLOCK_SIZE[0]}, too few "
            f"for q_len={tq}; a mask sliced for decoding needs seq_lengths = (1, KV_LEN)"
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
