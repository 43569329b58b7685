"""Transformer blocks (SPEC section 6): the encoder block and the decoder block.

Every sub-layer (self-attention, cross-attention, feed-forward) is wrapped the same way,
with a residual connection and a LayerNorm, in one of two orders:

- post-LN (Vaswani et al. 2017, the default): ``x = LayerNorm(x + Dropout(sublayer(x)))``;
- pre-LN (``norm_first=True``, more stable to train deep): ``x = x + Dropout(sublayer(LayerNorm(x)))``.
  A pre-LN stack leaves its output un-normalised, so the stack owning the blocks adds a
  final LayerNorm (see ``qkv.models.transformer_stack``).

Dropout acts at three sites, each with its own rate: ``dropout`` on the residual branches
(the ``Dropout`` above), ``attention_dropout`` on the attention weights, and
``activation_dropout`` on the feed-forward's hidden activations.  The last two default to
``dropout`` (one rate everywhere, as in the paper and ``nn.TransformerEncoderLayer``).

The parameter layout mirrors ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(``bias=False`` included: no bias anywhere, LayerNorms too) so weights can be copied across
(``qkv.models.transformer_stack.load_torch_transformer``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.block_mask import BlockMask

from .attention_positions import AttentionPositions
from .cache import KVCache, RollingKVCache, StaticKV
from .feedforward import FeedForward
from .multihead import MultiHeadAttention

__all__ = [
    "Residual",
    "SelfAttentionSublayers",
    "EncoderBlock",
    "DecoderBlock",
    "EncoderBlockOutput",
    "DecoderBlockOutput",
    "DecoderLayerState",
]


@dataclass
class EncoderBlockOutput:
    """hidden: (B, S, D).  self_attention: (B, H, S, S) weights when asked for, else None."""

    hidden: Tensor
    self_attention: Tensor | None = None


@dataclass
class DecoderBlockOutput:
    """hidden: (B, T, D).  When asked for: self_attention (B, H, T, Tk) with Tk the prefix
    length so far (T without a cache), cross_attention (B, H, T, S); else None."""

    hidden: Tensor
    self_attention: Tensor | None = None
    cross_attention: Tensor | None = None


@dataclass
class DecoderLayerState:
    """One decoder block's decoding state: the keys/values of the target prefix (grows by one
    position per step) and of the encoder output (projected once, by :meth:`DecoderBlock.start`).
    Reorderable along the batch by ``qkv.models.select_state``."""

    self_cache: KVCache
    memory: StaticKV


Sublayer = Callable[[Tensor], tuple[Tensor, Tensor | None]]


class Residual(nn.Module):
    """The residual wrapping every block shares, in post- or pre-norm order (``norm_first``):
    ``norm(x + Dropout(sublayer(x)))`` or ``x + Dropout(sublayer(norm(x)))``.  A block sets
    ``norm_first`` and ``dropout`` (the residual branches')."""

    norm_first: bool
    dropout: nn.Dropout

    def _residual(
        self, x: Tensor, sublayer: Sublayer, norm: nn.Module
    ) -> tuple[Tensor, Tensor | None]:
        if self.norm_first:
            out, weights = sublayer(norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return norm(x + self.dropout(out)), weights

    def _feed_forward_sublayer(self, x: Tensor) -> tuple[Tensor, None]:
        return self.feed_forward(x), None

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"


class SelfAttentionSublayers(Residual):
    """A block of two sublayers, ``self_attention`` then ``feed_forward``, each with its norm
    (``self_attention_norm``, ``feed_forward_norm``): the encoder block and the language
    model's block.  ``causal_by_default``: whether the self-attention is causal unless the
    call says otherwise.

    Shapes: x (B, S, D), mask broadcastable to (B, H, S, S) (True = may attend) ->
    EncoderBlockOutput(hidden (B, S, D), self_attention (B, H, S, Sk) when asked for)."""

    causal_by_default: bool

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        need_weights: bool = False,
        causal: bool | None = None,
        cache: KVCache | RollingKVCache | None = None,
        block_mask: BlockMask | None = None,
    ) -> EncoderBlockOutput:
        """``causal`` (None: the block's ``causal_by_default``) / ``cache``: masked
        self-attention with a growing KV cache, as a decoder-only language model runs the
        block (x then holds only the newest positions).  ``block_mask``: a flex block mask
        for the self-attention (a sliding window, packed documents)."""
        causal = self.causal_by_default if causal is None else causal

        def attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attention(
                h,
                mask=mask,
                causal=causal,
                cache=cache,
                need_weights=need_weights,
                block_mask=block_mask,
            )

        x, weights = self._sublayers(x, attend)
        return EncoderBlockOutput(x, weights)

    def forward_with_attention(
        self, x: Tensor, self_attention: Callable[[Tensor], Tensor]
    ) -> Tensor:
        """The block with its self-attention computed by ``self_attention(h)`` -- h the
        sublayer's input (B, S, D), normalised first under ``norm_first`` -> (B, S, D) -- and
        the residual wrapping and the feed-forward exactly as :meth:`forward` runs them: the
        seam for attention computed elsewhere (ring attention over processes).
        Shapes: x (B, S, D) -> hidden (B, S, D)."""
        x, _ = self._sublayers(x, lambda h: (self_attention(h), None))
        return x

    def _sublayers(self, x: Tensor, attend: Sublayer) -> tuple[Tensor, Tensor | None]:
        x, weights = self._residual(x, attend, self.self_attention_norm)
        x, _ = self._residual(x, self._feed_forward_sublayer, self.feed_forward_norm)
        return x, weights


class _ResidualBlock(Residual):
    """What both blocks share: the constructor, the sublayers, and the residual + LayerNorm
    wrapping in post- or pre-LN order.

    Sublayers, in order: ``self_attention`` (with the attention ``positions`` component, if
    any), then ``cross_attention`` for a block whose ``has_cross_attention`` is True, then
    ``feed_forward``; each with its LayerNorm ``<name>_norm``.  ``bias=False`` drops every
    bias, the LayerNorms' included, as PyTorch's ``bias=False`` layers do.  ``dropout`` acts
    on the residual branches; ``attention_dropout`` / ``activation_dropout`` (None = the
    same as ``dropout``) on the attention weights / the feed-forward's hidden layer.
    """

    has_cross_attention = False

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        positions: AttentionPositions | None = None,
        num_kv_heads: int | None = None,
    ):
        super().__init__()
        attention_dropout = dropout if attention_dropout is None else attention_dropout
        activation_dropout = dropout if activation_dropout is None else activation_dropout
        rates = dict(
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
        )
        for name, rate in rates.items():
            if not 0.0 <= rate < 1.0:
                raise InputError(f"{name}={rate} must be in [0, 1)")
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)

        def attention(positions: AttentionPositions | None = None) -> MultiHeadAttention:
            return MultiHeadAttention(
                d_model,
                num_heads,
                num_kv_heads=num_kv_heads,
                bias=bias,
                dropout=attention_dropout,
                positions=positions,
            )

        def norm() -> nn.LayerNorm:
            return nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)

        self.self_attention = attention(positions)
        self.self_attention_norm = norm()
        if self.has_cross_attention:
            self.cross_attention = attention()  # positions act on self-attention only
            self.cross_attention_norm = norm()
        self.feed_forward = FeedForward(
            d_model, d_ff, activation=activation, dropout=activation_dropout, bias=bias
        )
        self.feed_forward_norm = norm()


class EncoderBlock(SelfAttentionSublayers, _ResidualBlock):
    """Multi-head self-attention, then a position-wise feed-forward network, each with a
    residual connection and LayerNorm.

    ``EncoderBlock(d_model, num_heads, d_ff, *, dropout=0.1, attention_dropout=None,
    activation_dropout=None, activation="relu", norm_first=False, layer_norm_eps=1e-5,
    bias=True, positions=None, num_kv_heads=None)``; ``positions``: an attention position
    component (RoPE, ALiBi) for the self-attention; ``num_kv_heads``: grouped key/value heads
    (None = one per query head).

    Shapes: x (B, S, D), mask broadcastable to (B, H, S, S) (True = may attend; usually the
    source padding mask (B, 1, 1, S)) -> EncoderBlockOutput(hidden (B, S, D), ...).
    """

    causal_by_default = False  # an encoder sees both sides; a language model sets causal


class DecoderBlock(_ResidualBlock):
    """Causal self-attention, cross-attention over the encoder output (``memory``), then a
    feed-forward network; each with a residual connection and LayerNorm.

    Constructed as :class:`EncoderBlock` (``positions`` act on the self-attention only).
    Teacher forcing: ``block(x, memory, memory_mask=...)`` with the whole target prefix.
    Incremental decoding: ``state = block.start(memory)`` once, then
    ``block(x_new, memory_mask=..., state=state)`` with only the newest position(s); the
    state's KV cache grows in place, so a step costs O(prefix), not O(prefix^2).

    Shapes: x (B, T, D); memory (B, S, D); memory_mask broadcastable to (B, H, T, S), usually
    the source padding mask (B, 1, 1, S); self_mask broadcastable to (B, H, T, Tk), combined
    with the causal mask -> DecoderBlockOutput(hidden (B, T, D), ...).
    """

    has_cross_attention = True

    def start(self, memory: Tensor) -> DecoderLayerState:
        """An empty self-attention cache and the cross-attention keys/values of ``memory``,
        computed once for all steps.  Shapes: memory (B, S, D)."""
        return DecoderLayerState(KVCache(), self.cross_attention.project_kv(memory))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        memory_mask: Tensor | None = None,
        self_mask: Tensor | None = None,
        state: DecoderLayerState | None = None,
        need_weights: bool = False,
    ) -> DecoderBlockOutput:
        """Teacher forcing with ``memory``, or one incremental step with ``state`` (exactly one of
        the two).  Shapes: as the class says; -> DecoderBlockOutput(hidden (B, T, D), weights
        when asked for)."""
        if (memory is None) == (state is None):
            raise ValueError(
                "pass the encoder output as memory (teacher forcing) or a state from "
                "DecoderBlock.start(memory) (incremental decoding), exactly one of the two"
            )
        if state is not None and not isinstance(state, DecoderLayerState):
            raise TypeError(f"state must be a DecoderLayerState, got {type(state).__name__}")
        self_cache = None if state is None else state.self_cache
        memory_kv = None if state is None else state.memory

        def attend_self(h: Tensor) -> tuple[Tensor, Tensor | None]:
            return self.self_attention(
                h, mask=self_mask, causal=True, cache=self_cache, need_weights=need_weights
            )

        def attend_memory(h: Tensor) -> tuple[Tensor, Tensor | None]:
            if memory_kv is not None:
                return self.cross_attention(
                    h, mask=memory_mask, cache=memory_kv, need_weights=need_weights
                )
            return self.cross_attention(h, memory, mask=memory_mask, need_weights=need_weights)

        x, self_weights = self._residual(x, attend_self, self.self_attention_norm)
        x, cross_weights = self._residual(x, attend_memory, self.cross_attention_norm)
        x, _ = self._residual(x, self._feed_forward_sublayer, self.feed_forward_norm)
        return DecoderBlockOutput(x, self_weights, cross_weights)
