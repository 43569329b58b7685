"""The attention function transformers calls for ``attn_implementation="qkv"``.

Every attention layer that goes through transformers' ``AttentionInterface`` calls
:func:`attention_forward` with its projected heads, the mask its model built (a
:class:`~.masks.PatternMask`, None, or a 4D tensor the caller passed) and the layer's extras:
``scaling``, ``dropout``, ``softcap`` (Gemma 2), ``s_aux`` / ``sinks`` (attention sinks,
GPT-OSS), ``position_bias`` (T5's relative bias), ``is_causal``, ``output_attentions``.
One of four routes computes it, each exactly the eager softmax(QK^T * scale + ...) V:

- **dense**: plain causal or padded masks on PyTorch's fused kernel through
  :func:`qkv.attention` (a causal call without padding through :func:`qkv.flex_attention`);
  grouped key/value heads go into the kernel as they are, never repeated in memory;
- **flex**: windows, packed documents (a sparse :class:`~.masks.PatternMask`), soft-capping,
  sinks and a relative bias on a block-skipping pattern, on qkv's flex kernel forward and
  backward (sinks through its log-sum-exp);
- **weights**: ``output_attentions=True`` through :func:`qkv.attention_with_weights`, which
  writes the weight matrix once and uses it for the output, the returned weights and the
  backward;
- **explicit**: what no kernel takes (weights with soft-capping, sinks or a learned bias;
  dropout with a score modification), written out with autograd as eager does, but with
  grouped key/value heads broadcast instead of repeated.

A query that may attend no key gets output 0 (and weights 0) on every route, never NaN.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import InputError
from ...functional import attention, attention_with_weights, flex_attention, masked_softmax
from ...functional.block_mask import BlockMask, create_block_mask
from ...functional.patterns import causal, chain_scores, softcap
from .masks import BLOCK_SIZE, PatternMask

__all__ = ["attention_forward"]


def attention_forward(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: PatternMask | Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    s_aux: Tensor | None = None,
    position_bias: Tensor | None = None,
    is_causal: bool | None = None,
    output_attentions: bool = False,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """transformers' attention-function signature, computed by qkv.

    Shapes:
        query (B, H, Tq, Dh); key (B, Hkv, Tk, Dh); value (B, Hkv, Tk, Dv), Hkv dividing H
        (query head h reads key/value head h // (H / Hkv), as transformers' ``repeat_kv``).
        attention_mask: a PatternMask or a (B or 1, 1 or H, Tq, Tk) tensor, boolean (True =
        may attend) or float (added to the scores), or None (causal when the layer says so
        and Tq > 1).  position_bias (B or 1, H, Tq, Tk) float, added to the scores.  s_aux
        (H,): one sink logit per head, in every row's softmax with no value.
        Returns (output (B, Tq, H, Dv), weights (B, H, Tq, Tk) or None): the weights only
        with ``output_attentions=True``.
    """
    sinks = s_aux if s_aux is not None else kwargs.get("sinks")
    call = _Call.make(module, query, key, value, attention_mask, is_causal, position_bias)
    call.check_positions(kwargs.get("position_ids"))
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    dropout = float(dropout or 0.0)
    modified = softcap is not None or sinks is not None
    if output_attentions or _collecting_attentions():
        written_once = query.dtype in (torch.float32, torch.float64)  # attention_with_weights
        if written_once and not modified and dropout == 0.0 and not _needs_grad(call.bias):
            output, weights = attention_with_weights(
                query, key, value, mask=call.dense_or_bias(), causal=call.causal, scale=scale
            )
        else:
            output, weights = _explicit(call, scale, softcap, sinks, dropout)
    elif dropout > 0.0 and (modified or call.sparse):
        output, weights = _explicit(call, scale, softcap, sinks, dropout)
    elif (modified or call.sparse) and call.float_mask is None:
        output, weights = _flex(call, scale, softcap, sinks), None
    elif modified:
        output, weights = _explicit(call, scale, softcap, sinks, dropout)
    else:
        output, weights = _dense(call, scale, dropout), None
    return output.transpose(1, 2).contiguous(), weights


class _Call:
    """One call's tensors and its mask in every form a route may need."""

    def __init__(self, query, key, value, pattern, tensor_mask, causal, bias, float_mask):
        self.query, self.key, self.value = query, key, value
        self.pattern: PatternMask | None = pattern
        self.bool_mask: Tensor | None = tensor_mask
        self.causal: bool = causal
        self.bias: Tensor | None = bias  # position_bias and a float mask, added together
        self.float_mask: Tensor | None = float_mask

    @classmethod
    def make(cls, module, query, key, value, attention_mask, is_causal, position_bias) -> _Call:
        _check_heads(module, query, key, value)
        tq, tk = query.shape[2], key.shape[2]
        pattern = bool_mask = float_mask = None
        causal_call = False
        if isinstance(attention_mask, PatternMask):
            if attention_mask.shape[2:] == (tq, tk):
                pattern = attention_mask
            else:  # a cache that hands back fewer keys than the mask was built for
                bool_mask = attention_mask.dense[..., :tq, :tk]
        elif isinstance(attention_mask, Tensor):
            if attention_mask.dim() != 4:
                raise InputError(
                    f"attention_mask reached the attention layer with shape "
                    f"{tuple(attention_mask.shape)}; a 4D mask must be (B, 1, Tq, Tk) -- or "
                    "pass the 2D (B, T) padding mask and let the model build it"
                )
            attention_mask = attention_mask[..., :tk]
            if attention_mask.dtype == torch.bool:
                bool_mask = attention_mask
            else:
                float_mask = attention_mask.to(query.dtype)
        elif attention_mask is not None:
            raise InputError(
                f"attn_implementation='qkv' takes masks built by its own mask function, a 4D "
                f"tensor or None, not {type(attention_mask).__name__}: pass the 2D padding "
                "mask (attention_mask=...) and let the model build the rest"
            )
        else:
            # as transformers' sdpa: without a mask the layer's own flag says causal or not
            layer_causal = (
                is_causal if is_causal is not None else getattr(module, "is_causal", True)
            )
            causal_call = bool(layer_causal) and tq > 1
        bias = None
        if position_bias is not None:
            bias = position_bias[..., :tk].to(query.dtype)
        if float_mask is not None:
            bias = float_mask if bias is None else bias + float_mask
        return cls(query, key, value, pattern, bool_mask, causal_call, bias, float_mask)

    @property
    def sparse(self) -> bool:
        return self.pattern is not None and self.pattern.sparse

    def boolean(self) -> Tensor | None:
        """The mask as a dense bool tensor (None: no mask beyond ``causal``)."""
        return self.pattern.dense if self.pattern is not None else self.bool_mask

    def dense_or_bias(self) -> Tensor | None:
        """The mask for :func:`qkv.attention`: bool, or a float bias with -inf where masked."""
        mask = self.boolean()
        if self.bias is None:
            return mask
        if mask is None:
            return self.bias
        return self.bias.masked_fill(~mask, float("-inf"))

    def block_mask(self) -> BlockMask | None:
        """The mask as a qkv BlockMask (None: every key)."""
        if self.pattern is not None:
            return self.pattern.block_mask
        tq, tk = self.query.shape[2], self.key.shape[2]
        if self.bool_mask is not None:
            return _dense_block_mask(self.bool_mask, self.query.shape[0], tq, tk)
        return _causal_block_mask(tq, tk, self.query.device) if self.causal else None

    def check_positions(self, position_ids: Tensor | None) -> None:
        """Packed rows (position ids restarting inside a row) must not see across documents.

        transformers turns restarting position ids into a document mask only when the model
        is called without an attention mask and without a cache; otherwise the documents of
        a row silently attend to each other.  Here the first token of each document is
        checked against the mask it actually got: may it see the token before it?
        """
        tq, tk = self.query.shape[2], self.key.shape[2]
        if position_ids is None or tq != tk or tq < 2 or self.bias is not None:
            return
        if position_ids.dim() != 2 or position_ids.shape[-1] != tq:
            return
        if self.pattern is not None and self.pattern.key_padding is not None:
            real = self.pattern.key_padding
        elif self.bool_mask is not None:
            real = self.bool_mask.any(-2)[:, 0]  # keys someone may see: the real tokens
        else:
            real = torch.ones(1, tq, dtype=torch.bool, device=position_ids.device)
        positions = position_ids.expand(max(position_ids.shape[0], real.shape[0]), -1)
        real = real.expand(positions.shape[0], -1)
        restart = (positions[:, 1:] - positions[:, :-1] != 1) & real[:, 1:] & real[:, :-1]
        if not bool(restart.any()):
            return
        rows, starts = torch.nonzero(restart, as_tuple=True)
        starts = starts + 1
        if self.pattern is not None:
            sees_previous = self.pattern.allows(rows, starts, starts - 1)
        elif self.bool_mask is not None:
            mask = self.bool_mask.expand(positions.shape[0], -1, -1, -1)
            sees_previous = mask[rows, 0, starts, starts - 1]
        else:
            sees_previous = torch.ones_like(rows, dtype=torch.bool)
        if bool(sees_previous.any()):
            n = int(sees_previous.nonzero()[0, 0])
            row, start = int(rows[n]), int(starts[n])
            raise InputError(
                f"position_ids restart inside row {row} at token {start} (packed documents), "
                "but the attention mask lets that token see the document before it: "
                "transformers builds a document mask from position ids only when the model is "
                "called without an attention mask and without a cache (attention_mask=None, "
                "use_cache=False), and only for models that pass position ids to their mask; "
                "otherwise give each document its own row"
            )


def _collecting_attentions() -> bool:
    """Whether the model's forward is recording attention weights.  Not every layer passes
    ``output_attentions`` on (GPT-2's consumes it); transformers records the weights by a
    forward hook on the layer, switched on for the call through a context variable."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # a transformers without output recording passes the flag instead
        return False
    collecting = _active_collector.get()
    return bool(collecting) and any(key.endswith("attentions") for key in collecting)


def _check_heads(module, query: Tensor, key: Tensor, value: Tensor) -> None:
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise InputError(
            f"{type(module).__name__} passed query/key/value of shapes {tuple(query.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}; the attention interface takes "
            "(B, H, T, Dh) tensors"
        )
    if query.shape[1] % key.shape[1] or key.shape[1] != value.shape[1]:
        raise InputError(
            f"{type(module).__name__}: {query.shape[1]} query heads cannot share "
            f"{key.shape[1]} key / {value.shape[1]} value heads (grouped-query attention "
            "needs the key/value head count to divide the query head count)"
        )


def _needs_grad(tensor: Tensor | None) -> bool:
    return tensor is not None and tensor.requires_grad and torch.is_grad_enabled()


def _dense(call: _Call, scale: float, dropout: float) -> Tensor:
    """Plain causal or padded attention on PyTorch's fused kernel, with grouped key/value
    heads unrepeated on the CPU (``enable_gqa``; transformers' sdpa repeats them whenever a
    mask is passed)."""
    query, key, value = call.query, call.key, call.value
    mask = call.dense_or_bias()
    if mask is None and dropout == 0.0:
        # flex_attention sends a call without a mask, or with exactly the causal triangle,
        # to the fused kernel with grouped heads left unrepeated
        tq, tk = query.shape[2], key.shape[2]
        block_mask = _causal_block_mask(tq, tk, query.device) if call.causal else None
        return flex_attention(
            query, key, value, block_mask=block_mask, scale=scale, enable_gqa=True
        )
    return attention(
        query, key, value, mask=mask, causal=call.causal, scale=scale, dropout=dropout
    ).output


def _flex(call: _Call, scale: float, cap: float | None, sinks: Tensor | None) -> Tensor:
    """The block-skipping kernel: windows, packed documents, soft-capping, sinks."""
    query, key, value = call.query, call.key, call.value
    score_mod = chain_scores(
        softcap(float(cap)) if cap is not None else None,
        _bias_score(call.bias, query.shape[0], query.shape[1]) if call.bias is not None else None,
    )
    block_mask = call.block_mask()
    if sinks is None:
        return flex_attention(
            query, key, value, score_mod, block_mask, scale, enable_gqa=True, return_lse=False
        )
    output, lse = flex_attention(
        query, key, value, score_mod, block_mask, scale, enable_gqa=True, return_lse=True
    )
    # A sink is one more logit in every row's softmax, with no value: the row's weights
    # shrink by exp(lse) / (exp(lse) + exp(sink)), exactly, and the gradient flows through lse.
    sink = sinks.to(lse.dtype).view(1, -1, 1)
    shrink = torch.exp(lse - torch.logaddexp(lse, sink.expand_as(lse)))
    return output * shrink.unsqueeze(-1).to(output.dtype)


def _bias_score(bias: Tensor, batch: int, heads: int):
    """score + bias[b, h, q, kv]: a (B or 1, H or 1, Tq, Tk) additive bias as a score_mod;
    flex_attention gives the bias its gradient (it captures tensors that require grad)."""
    full = bias.expand(batch, heads, *bias.shape[2:])

    def bias_score(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + full[b, h, q_idx, kv_idx]

    return bias_score


def _explicit(
    call: _Call, scale: float, cap: float | None, sinks: Tensor | None, dropout: float
) -> tuple[Tensor, Tensor]:
    """softmax(QK^T * scale, soft-capped, + bias, masked, with sinks) V, written out with
    autograd -- the weights and anything no kernel takes.  Grouped key/value heads are
    broadcast over their query heads, never repeated.  Returns (output (B, H, Tq, Dv),
    weights (B, H, Tq, Tk))."""
    query, key, value = call.query, call.key, call.value
    batch, heads, tq, _ = query.shape
    kv_heads, tk = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    q5 = query.reshape(batch, kv_heads, groups, tq, query.shape[-1])
    scores = (q5 @ key.unsqueeze(2).transpose(-2, -1)).reshape(batch, heads, tq, tk) * scale
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    if call.bias is not None:
        scores = scores + call.bias
    mask = call.boolean()
    if call.causal:
        below = torch.ones(tq, tk, dtype=torch.bool, device=query.device).tril(tk - tq)
        mask = below if mask is None else mask & below
    if sinks is not None:
        # the sink: one more column, always open, whose weight is dropped after the softmax
        sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(batch, heads, tq, 1)
        scores = torch.cat([scores, sink], dim=-1)
        if mask is not None:  # (Tq, Tk) for a causal call without padding, else 4D
            mask = mask.expand(batch, heads, tq, tk)
            mask = torch.cat([mask, mask.new_ones(batch, heads, tq, 1)], -1)
    # half precisions take the softmax in float32, as transformers' eager layers do
    weights = masked_softmax(scores.float(), mask).to(query.dtype)
    if sinks is not None:
        weights = weights[..., :tk]
    used = F.dropout(weights, p=dropout, training=True) if dropout > 0.0 else weights
    output = used.reshape(batch, kv_heads, groups, tq, tk) @ value.unsqueeze(2)
    return output.reshape(batch, heads, tq, value.shape[-1]), weights


@functools.lru_cache(maxsize=16)
def _causal_block_mask(tq: int, tk: int, device: torch.device) -> BlockMask:
    """The causal triangle (end-aligned) as a block mask, built once per size."""
    offset = tk - tq

    def end_aligned_causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return causal(b, h, q_idx + offset, kv_idx)

    return create_block_mask(end_aligned_causal, None, None, tq, tk, device, BLOCK_SIZE)


def _dense_block_mask(mask: Tensor, batch: int, tq: int, tk: int) -> BlockMask:
    """A (B or 1, 1, Tq, Tk) bool tensor as a block mask (its mask_mod reads the tensor)."""
    full = mask.expand(batch, 1, tq, tk)

    def given_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return full[b, 0, q_idx, kv_idx]

    return create_block_mask(given_mask, batch, None, tq, tk, mask.device, BLOCK_SIZE)
