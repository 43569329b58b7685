"""attention(): one call, the equations of SPEC sections 1-3, fast backends behind it."""

from __future__ import annotations

import functools
from collections.abc import Callable

from torch import Tensor

from ..errors import InputError
from .backends import (
    AttentionCall,
    AttentionOutput,
    Backend,
    BackendChoice,
    available_backends,
    choose_backend,
    make_call,
    run_backend,
)
from .backends.explicit import explicit_attention, supports_explicit
from .backends.explicit_backend import inspection_weights
from .block_mask import BlockMask, create_block_mask
from .checks import check_causal, check_tensors
from .flex import ScoreMod, flex_attention, flex_engine
from .scores import resolve_scale

__all__ = ["attention", "attention_with_weights", "explain_backend"]


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    score: str = "scaled_dot",
    scale: float | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    weights_grad: bool = True,
    backend: str = "auto",
    block_mask: BlockMask | None = None,
    score_mod: ScoreMod | None = None,
) -> AttentionOutput:
    r"""z_i = sum_j alpha_ij v_j,  alpha_ij = softmax_j(e_ij),  e_ij = score(q_i, k_j).

    $$z_i = \sum_j \alpha_{ij} v_j,\qquad \alpha_{ij} = \mathrm{softmax}_j(e_{ij}),\qquad e_{ij} = \frac{q_i \cdot k_j}{\sqrt{D_h}}$$

    Shapes:
        query (B, H, Tq, Dh); key (B, Hkv, Tk, Dh); value (B, Hkv, Tk, Dv), as PyTorch's
        ``scaled_dot_product_attention``.  ``Dv`` may differ from ``Dh``; ``Hkv`` may divide
        ``H`` (grouped-query attention: each key/value head serves H / Hkv query heads).
        Returns ``AttentionOutput(output (B, H, Tq, Dv), weights (B, H, Tq, Tk) or None)``.

    Args:
        mask: boolean, **True = may attend**, broadcastable to (B, H, Tq, Tk); or a float
            tensor, added to the scores as a bias (e.g. ALiBi; -inf blocks a key).
        causal: query i may not attend to key j > i.  Composes with ``mask``.  When
            Tq < Tk (decoding with a cache) the queries are taken to be the *last* Tq
            positions: the causal diagonal is aligned to the end, so the last query sees
            every key.
        score: "scaled_dot" (q.k / sqrt(Dh), or q.k * ``scale``) or "dot" (q.k).
        dropout: probability of dropping a weight.  Applied whenever > 0, like SDPA's
            ``dropout_p``; layers pass 0 in eval mode.
        need_weights: also return the weights (before dropout).  They carry gradients.
        weights_grad: False: the weights are for inspection only and carry **no gradient**
            (the output still does).  Then in float32/float64 without dropout one weight
            matrix, written once, gives the output, the weights and the backward
            (:func:`attention_with_weights`); otherwise the output takes the fastest backend
            and the weights are computed beside it without autograd.
        backend: "auto" (the fastest that supports the call; see :func:`explain_backend`),
            "sdpa", "chunked", "explicit" (weights without gradient) or "reference" (the
            equations).
        block_mask: FlexAttention's (see :func:`~qkv.functional.flex.flex_attention`): the
            call then runs on the flex kernel, which skips the blocks the mask empties.
            ``mask``, dropout and weights do not combine with it (put the mask into the
            mask_mod).
        score_mod: FlexAttention's, as for ``block_mask``: the call runs on the flex kernel.
            ``causal`` is added as an end-aligned causal block mask when ``block_mask`` is
            None.

    A query whose every key is masked gets output 0 and weights 0 (finite gradients),
    never NaN, on every backend.
    """
    call_args = (query, key, value, mask, causal, score, scale, dropout, need_weights)
    _, run = _route(call_args, weights_grad, backend, block_mask, score_mod)
    return run()


def explain_backend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    score: str = "scaled_dot",
    scale: float | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    weights_grad: bool = True,
    backend: str = "auto",
    block_mask: BlockMask | None = None,
    score_mod: ScoreMod | None = None,
) -> BackendChoice:
    """Which backend :func:`attention` would run with these arguments, and what ruled out
    each faster one.  ``print(explain_backend(q, k, v, need_weights=True))``.  Weights for
    inspection (``weights_grad=False``) go to "explicit" where it can serve them; a
    ``block_mask`` or ``score_mod`` goes to "flex"."""
    call_args = (query, key, value, mask, causal, score, scale, dropout, need_weights)
    choice, _ = _route(call_args, weights_grad, backend, block_mask, score_mod)
    return choice


def _route(
    call_args: tuple,
    weights_grad: bool,
    backend: str,
    block_mask: BlockMask | None,
    score_mod: ScoreMod | None,
) -> tuple[BackendChoice, Callable[[], AttentionOutput]]:
    """Where a call goes -- ``call_args``: attention's first nine arguments, as
    :func:`make_call` takes them -- and the function that runs it there: the one decision
    :func:`attention` carries out and :func:`explain_backend` reports."""
    if block_mask is not None or score_mod is not None:
        query, key, value, mask, causal, score, scale, dropout, need_weights = call_args
        _check_flex_call(mask, dropout, need_weights, backend, causal and block_mask is not None)
        passed_over = {name: FLEX_REASON for name in available_backends()}
        choice = BackendChoice("flex", passed_over, flex_engine(query.device))
        args = (query, key, value, block_mask, score_mod, causal, score, scale)
        return choice, functools.partial(_flex_call, *args)
    call = make_call(*call_args)
    if not (call.need_weights and not weights_grad):
        impl, choice = choose_backend(call, backend)
        return choice, functools.partial(run_backend, impl, call)
    # weights for inspection: the output with its gradient, the weights without one
    reason = supports_explicit(call.query, call.mask, call.dropout)
    if backend == "auto" and reason is None:
        backend = "explicit"
    impl, choice = choose_backend(call._replace(need_weights=False), backend)
    if backend == "explicit":  # one matrix: output, weights and backward
        return choice, functools.partial(run_backend, impl, call)
    passed_over = {"explicit": reason or f"backend={backend!r} requested", **choice.passed_over}
    return BackendChoice(choice.backend, passed_over), functools.partial(_beside, impl, call)


FLEX_REASON = "block_mask/score_mod: only the flex kernel evaluates mask_mod/score_mod per tile"


def _check_flex_call(
    mask: Tensor | None, dropout: float, need_weights: bool, backend: str, causal_too: bool
) -> None:
    problems = [
        ("a mask", mask is not None),
        ("dropout", dropout > 0),
        ("need_weights", need_weights),
        (f"backend={backend!r}", backend not in ("auto", "flex")),
        ("causal=True with a block_mask", causal_too),
    ]
    found = [name for name, present in problems if present]
    if found:
        raise InputError(
            f"block_mask/score_mod run on the flex kernel, which does not take {', '.join(found)}: "
            "put masks into the mask_mod (qkv.and_masks(causal, ...)) and drop the rest"
        )


def _flex_call(query, key, value, block_mask, score_mod, causal, score, scale) -> AttentionOutput:
    check_tensors(query, key, value)
    tq, tk = query.shape[2], key.shape[2]
    if causal:  # end-aligned, as attention's causal: the queries are the last Tq positions
        check_causal(True, tq, tk)
        offset = tk - tq

        def end_aligned_causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return kv_idx <= q_idx + offset

        block_mask = create_block_mask(end_aligned_causal, None, None, tq, tk, query.device)
    scale = resolve_scale(score, scale, query.shape[-1])
    output = flex_attention(
        query, key, value, score_mod, block_mask, scale, enable_gqa=True, return_lse=False
    )
    return AttentionOutput(output, None)


def _beside(impl: Backend, call: AttentionCall) -> AttentionOutput:
    """The output from ``impl``; the weights (dropout or half precision) computed beside it,
    without autograd."""
    output = run_backend(impl, call._replace(need_weights=False)).output
    key = call.repeated_heads().key
    weights = inspection_weights(call.query, key, call.mask, call.causal, call.scale)
    return AttentionOutput(output, weights)


def attention_with_weights(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> AttentionOutput:
    """Scaled dot-product attention and its weights, for the price of writing the weights once.

    Same inputs and conventions as :func:`attention` (boolean mask True = may attend, or a
    float bias; end-aligned ``causal``; grouped key/value heads), without dropout.  The
    (B, H, Tq, Tk) weights are computed once and used three times: returned, multiplied
    into the output, and read back by the backward -- so asking for them costs less than
    running a fused kernel and computing them beside it.  The output is differentiable;
    the returned **weights carry no gradient** (use ``attention(..., backend="reference",
    need_weights=True)`` to differentiate through them).  float32/float64 only.

    Shapes: query (B, H, Tq, Dh), key (B, Hkv, Tk, Dh), value (B, Hkv, Tk, Dv) ->
    (output (B, H, Tq, Dv), weights (B, H, Tq, Tk)).
    """
    call = make_call(query, key, value, mask, causal, "scaled_dot", scale, 0.0, True)
    call = call.repeated_heads()
    reason = supports_explicit(call.query, call.mask, 0.0)
    if reason is not None:
        raise ValueError(f"attention_with_weights cannot take {reason}; use attention()")
    output, weights = explicit_attention(
        call.query, call.key, call.value, call.mask, call.causal, call.scale
    )
    return AttentionOutput(output, weights)
