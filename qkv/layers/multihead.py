"""Multi-head attention (SPEC section 5): self, causal, cross, grouped KV, KV cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from ..functional import BlockMask, attention, merge_heads, split_heads
from ..functional.patterns import chain_scores
from .attention_positions import AttentionPositions
from .cache import AttentionCache, StaticKV
from .multihead_checks import MultiHeadInputChecks
from .saved_formats import stack_legacy_projections
from .torch_weights import layer_from_torch

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(MultiHeadInputChecks, nn.Module):
    r"""Project Q, K, V; split the width into heads; attend in each head; concatenate; project.

    ``d_model = num_heads * head_dim``.  ``num_kv_heads`` < ``num_heads`` gives grouped-query
    attention (1 = multi-query): each key/value head serves num_heads / num_kv_heads query
    heads.  ``output_bias``: a bias on the output projection (None: as ``bias``; Qwen2
    biases Q, K, V only).  ``query_norm`` / ``key_norm``: QK-norm components applied to
    every head's queries and keys (B, H, T, Dh) after the positions rotate them.  ``kdim``/``vdim``: widths of the key/value inputs (cross-attention over another
    model's states).  All tensors are batch-first (B, T, D).

    $$\mathrm{MultiHead}(Q, K, V) = [\mathrm{head}_1; \dots; \mathrm{head}_h]\,W^O,\qquad
    \mathrm{head}_i = \mathrm{softmax}\!\left(\frac{Q W_i^Q (K W_i^K)^\top}{\sqrt{d_h}}\right) V W_i^V$$
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        positions: AttentionPositions | None = None,
        output_bias: bool | None = None,
        query_norm: nn.Module | None = None,
        key_norm: nn.Module | None = None,
    ):
        super().__init__()
        if positions is not None and not isinstance(positions, AttentionPositions):
            raise InputError(
                f"positions must implement AttentionPositions (rotate and bias), "
                f"got {type(positions).__name__}"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or d_model % num_heads:
            raise InputError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if num_kv_heads < 1 or num_heads % num_kv_heads:
            raise InputError(
                f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}"
            )
        if not 0.0 <= dropout < 1.0:
            raise InputError(f"dropout={dropout} must be in [0, 1)")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.kdim, self.vdim = kdim or d_model, vdim or d_model
        self.dropout = dropout
        kv_width = num_kv_heads * self.head_dim
        self.widths = (d_model, kv_width, kv_width)  # rows of W_Q, W_K, W_V
        # Q, K and V read inputs of one width (self-attention, or cross-attention over memory
        # as wide as the queries): their weights are stacked in one matrix, as in
        # nn.MultiheadAttention, so self-attention projects with one matmul and trains one
        # parameter.  Inputs of other widths (kdim/vdim) need three matrices.
        self.packed = self.kdim == self.vdim == d_model
        if self.packed:
            self.in_proj_weight = nn.Parameter(torch.empty(sum(self.widths), d_model))
            self.in_proj_bias = nn.Parameter(torch.empty(sum(self.widths))) if bias else None
            self._reset_in_proj()
        else:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(self.kdim, kv_width, bias=bias)
            self.v_proj = nn.Linear(self.vdim, kv_width, bias=bias)
        self.out_proj = nn.Linear(
            d_model, d_model, bias=bias if output_bias is None else output_bias
        )
        self.positions = positions
        # QK-norm: each head's queries and keys normalised after the positions rotate them
        # and before the cache keeps them (nanochat's order; (B, H, T, Dh) -> the same).
        self.query_norm, self.key_norm = query_norm, key_norm

    def projections(self) -> tuple[tuple[Tensor, Tensor | None], ...]:
        """(weight, bias) of the Q, K and V projections, in that order: views into the
        stacked matrix when packed (writing to them writes the layer's weights).  Shapes:
        W_Q (D, D), W_K and W_V (Hkv * Dh, kdim / vdim); biases (rows,) or None."""
        if not self.packed:
            return tuple((p.weight, p.bias) for p in (self.q_proj, self.k_proj, self.v_proj))
        weights = self.in_proj_weight.split(self.widths)
        biases = (None,) * 3 if self.in_proj_bias is None else self.in_proj_bias.split(self.widths)
        return tuple(zip(weights, biases, strict=True))

    @torch.no_grad()
    def _reset_in_proj(self) -> None:
        # nn.Linear's initialisation, one projection at a time (the same numbers, drawn in the
        # same order, as three separate Linears: seeded models keep their weights).
        for weight, bias in self.projections():
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            if bias is not None:
                bound = 1 / math.sqrt(weight.shape[1]) if weight.shape[1] else 0.0
                nn.init.uniform_(bias, -bound, bound)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: AttentionCache | None = None,
        block_mask: BlockMask | None = None,
        score_mod=None,
    ) -> tuple[Tensor, Tensor | None]:
        """Shapes: query (B, Tq, D); key (B, Tk, kdim), value (B, Tk, vdim), both omitted for
        self-attention; mask broadcastable to (B, H, Tq, Tk), boolean (True = may attend) or a
        float bias -> output (B, Tq, D), weights (B, H, Tq, Tk) or None.

        ``cache``: a :class:`KVCache` for incremental self-attention (this call's keys and
        values are appended; the queries are the newest positions, so ``causal`` aligns to the
        end), or a :class:`StaticKV` from :meth:`project_kv` for cross-attention over fixed
        memory (key/value then omitted).

        Without ``need_weights`` the output takes the fastest backend.  With it, the per-head
        weights are returned for inspection and carry **no gradient**
        (``qkv.functional.attention(..., weights_grad=False)`` chooses how they are made).

        ``block_mask`` / ``score_mod`` (FlexAttention's) go to ``attention``'s flex path;
        position biases (ALiBi) then join as a score function, not a (Tq, Tk) tensor.  They
        take that path on their own too wherever it is exact (no ``mask``, no weights, no
        attention dropout active); otherwise they are added as a dense bias.  That
        kernel has no dropout on the weights: the layer's ``dropout`` is not applied there.
        """
        self._check_inputs(query, key, value, cache)
        if cache is not None and not cache.appends:  # fixed memory, projected once
            q = self._project_query(query)  # (B, H, Tq, Dh)
            k, v = cache.key, cache.value  # (B, Hkv, S, Dh)
        else:
            if key is None:  # self-attention: Q, K, V from one input in one matmul
                q, k, v = self.project_self(query)
            else:
                q = self._project_query(query)  # (B, H, Tq, Dh)
                k, v = self._project_kv(key, key if value is None else value)  # (B, Hkv, Tk, Dh)
            past = 0 if cache is None else cache.length  # positions before this call's
            # the keys attended start at position `first` (> 0 once a rolling cache has
            # dropped old ones); distance biases see the queries at past - first.
            first = 0 if cache is None else cache.first
            if self.positions is not None:  # self-attention only (checked)
                q = self.positions.rotate(q, start=past)
                k = self.positions.rotate(k, start=past)  # the KV heads, before the cache
            if self.query_norm is not None:
                q, k = self.query_norm(q), self.key_norm(k)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, Hkv, past - first + new positions, Dh)
            flex = block_mask is not None or score_mod is not None
            if self.positions is not None and not (flex or self._bias_as_score(mask, need_weights)):
                mask = _add_bias(mask, self._position_bias(q, k, past - first))
            elif self.positions is not None:
                score_mod = chain_scores(score_mod, self._position_score(q, k, past - first))
        output, weights = attention(
            q,
            k,
            v,
            mask=mask,
            causal=causal,
            dropout=self.dropout if self.training and block_mask is score_mod is None else 0.0,
            need_weights=need_weights,
            weights_grad=False,
            block_mask=block_mask,
            score_mod=score_mod,
        )
        return self.out_proj(merge_heads(output)), weights  # output (B, H, Tq, Dh) merged

    def _position_bias(self, q: Tensor, k: Tensor, past: int) -> Tensor | None:
        bias = self.positions.bias(
            query_start=past,
            num_queries=q.shape[2],
            num_keys=k.shape[2],
            device=q.device,
            dtype=q.dtype,
        )
        want = (self.num_heads, q.shape[2], k.shape[2])
        if bias is not None and (
            bias.dim() != 3
            or bias.shape[0] not in (1, want[0])
            or tuple(bias.shape[1:]) != want[1:]
        ):
            raise InputError(
                f"{type(self.positions).__name__}.bias returned shape {tuple(bias.shape)}; "
                f"attention needs (H, Tq, Tk) = {want}"
            )
        return bias

    def _bias_as_score(self, mask: Tensor | None, need_weights: bool) -> bool:
        """Whether a position bias (ALiBi) runs as a score function on the flex kernel, never
        a (Tq, Tk) tensor: where that is exact -- no other mask, no weights asked for, no
        attention dropout active (the flex kernel has neither)."""
        return (
            hasattr(self.positions, "score_mod")
            and mask is None
            and not need_weights
            and not (self.training and self.dropout > 0)
        )

    def _position_score(self, q: Tensor, k: Tensor, past: int):
        """The position bias as a score function, for the flex path (None: only rotations)."""
        if hasattr(self.positions, "score_mod"):
            return self.positions.score_mod(query_start=past)
        if self._position_bias(q, k, past) is not None:
            raise InputError(
                f"{type(self.positions).__name__} has no score_mod for block_mask/score_mod"
            )
        return None

    def project_kv(self, key: Tensor, value: Tensor | None = None) -> StaticKV:
        """Keys and values of fixed memory (an encoder's output), computed once for every
        decoding step.  Shapes: (B, S, kdim) -> key (B, Hkv, S, Dh), value (B, Hkv, S, Dh)."""
        value = key if value is None else value
        self._check_widths(key, value)
        return StaticKV(*self._project_kv(key, value))

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's W_Q x, W_K x, W_V x (in one matmul over the stacked weights),
        before positions act: the seam for attention computed elsewhere, whose output then
        goes through ``out_proj(merge_heads(output))``.  Shapes: x (B, T, D) -> q (B, H, T,
        Dh), k and v (B, Hkv, T, Dh)."""
        if not self.packed:
            return self._project_query(x), *self._project_kv(x, x)
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).split(self.widths, dim=-1)
        return (
            split_heads(q, self.num_heads),
            split_heads(k, self.num_kv_heads),
            split_heads(v, self.num_kv_heads),
        )

    def _project_query(self, query: Tensor) -> Tensor:
        """Shapes: (B, Tq, D) -> (B, H, Tq, Dh)."""
        return split_heads(F.linear(query, *self.projections()[0]), self.num_heads)

    def _project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Shapes: key (B, Tk, kdim), value (B, Tk, vdim) -> k, v (B, Hkv, Tk, Dh); memory
        that is both key and value takes one matmul over the stacked W_K, W_V."""
        _, (w_k, b_k), (w_v, b_v) = self.projections()
        if self.packed and key is value:
            rows = slice(self.d_model, None)
            bias = None if self.in_proj_bias is None else self.in_proj_bias[rows]
            k, v = F.linear(key, self.in_proj_weight[rows], bias).chunk(2, dim=-1)
        else:
            k, v = F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        return split_heads(k, self.num_kv_heads), split_heads(v, self.num_kv_heads)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # Checkpoints written before the projections were stacked hold three Linears
        # (q_proj, k_proj, v_proj): stack them, so old runs keep loading.
        if self.packed:
            stack_legacy_projections(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A qkv layer with the weights of a ``torch.nn.MultiheadAttention`` (batch_first or not:
        qkv is always batch-first, so transpose your inputs if the module was not)."""
        return layer_from_torch(cls, module)

    def extra_repr(self) -> str:
        kv = f", num_kv_heads={self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        return f"d_model={self.d_model}, num_heads={self.num_heads}{kv}, dropout={self.dropout}"


def _add_bias(mask: Tensor | None, bias: Tensor | None) -> Tensor | None:
    """One mask from a user mask (boolean True = may attend, or a float bias) and a position
    bias (H, Tq, Tk): blocked positions become -inf, biases add."""
    if bias is None:
        return mask
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, float("-inf"))  # broadcasts to (B, H, Tq, Tk)
    return mask.to(bias.dtype) + bias
