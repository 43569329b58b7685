"""The block of a decoder-only language model, built from the components it is given.

    x = x + Dropout(self_attention(self_attention_norm(x)))      # pre-norm (GPT-2, Llama)
    x = x + Dropout(feed_forward(feed_forward_norm(x)))

or, with ``norm_first=False``, the paper's post-norm order ``x = norm(x + Dropout(sublayer(x)))``.
The block owns no choice of its own: the attention (heads, positions, QK-norm), the two norms
(LayerNorm, RMSNorm, a parameter-free RMSNorm) and the feed-forward layer (a GELU or ReLU^2
MLP, SwiGLU) are modules passed in, so GPT, Llama and nanochat-style models are one block
assembled differently (:mod:`qkv.models.lm_builders`).  The parameter names are those of
:class:`~qkv.layers.EncoderBlock` (``self_attention``, ``self_attention_norm``,
``feed_forward``, ``feed_forward_norm``), so the weights of either load into the other.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.block_mask import BlockMask

from .blocks import EncoderBlockOutput
from .cache import KVCache, RollingKVCache
from .multihead import MultiHeadAttention

__all__ = ["LMBlock"]


class LMBlock(nn.Module):
    """Causal self-attention and a feed-forward layer, each wrapped in a residual connection.

    ``LMBlock(self_attention=MultiHeadAttention(...), feed_forward=..., self_attention_norm=
    ..., feed_forward_norm=..., dropout=0.0, norm_first=True)``.

    Shapes: x (B, T, D) -> EncoderBlockOutput(hidden (B, T, D), self_attention (B, H, T, Tk)
    when asked for).
    """

    def __init__(
        self,
        *,
        self_attention: MultiHeadAttention,
        feed_forward: nn.Module,
        self_attention_norm: nn.Module,
        feed_forward_norm: nn.Module,
        dropout: float = 0.0,
        norm_first: bool = True,
    ):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise InputError(f"dropout={dropout} must be in [0, 1)")
        self.self_attention = self_attention
        self.self_attention_norm = self_attention_norm
        self.feed_forward = feed_forward
        self.feed_forward_norm = feed_forward_norm
        self.dropout = nn.Dropout(dropout)  # on the residual branches
        self.norm_first = norm_first

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = True,
        cache: KVCache | RollingKVCache | None = None,
        need_weights: bool = False,
        block_mask: BlockMask | None = None,
    ) -> EncoderBlockOutput:
        """``mask`` (boolean, True = may attend) or ``block_mask`` (the flex kernel's): the
        pattern beyond plain causal; ``cache``: the keys and values of earlier positions (x
        then holds only the newest ones)."""

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
        """The block with its self-attention computed by ``self_attention(h)`` (h the
        sublayer's input, normalised first under ``norm_first``; (B, S, D) -> (B, S, D)): the
        seam for attention computed elsewhere (ring attention over processes)."""
        x, _ = self._sublayers(x, lambda h: (self_attention(h), None))
        return x

    def _sublayers(
        self, x: Tensor, attend: Callable[[Tensor], tuple[Tensor, Tensor | None]]
    ) -> tuple[Tensor, Tensor | None]:
        x, weights = self._residual(x, attend, self.self_attention_norm)
        x, _ = self._residual(x, lambda h: (self.feed_forward(h), None), self.feed_forward_norm)
        return x, weights

    def _residual(
        self,
        x: Tensor,
        sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]],
        norm: nn.Module,
    ) -> tuple[Tensor, Tensor | None]:
        if self.norm_first:
            out, weights = sublayer(norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return norm(x + self.dropout(out)), weights

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"
