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

from torch import nn

from qkv.errors import InputError

from .blocks import SelfAttentionSublayers
from .multihead import MultiHeadAttention

__all__ = ["LMBlock"]


class LMBlock(SelfAttentionSublayers):
    """Causal self-attention and a feed-forward layer, each wrapped in a residual connection.

    ``LMBlock(self_attention=MultiHeadAttention(...), feed_forward=..., self_attention_norm=
    ..., feed_forward_norm=..., dropout=0.0, norm_first=True)``.

    ``block(x, mask=None, causal=True, cache=None, need_weights=False, block_mask=None)``:
    ``mask`` (boolean, True = may attend) or ``block_mask`` (the flex kernel's) is the pattern
    beyond plain causal; ``cache`` the keys and values of earlier positions (x then holds
    only the newest ones).  The residual wrapping and the two sublayers are those of
    :class:`~qkv.layers.blocks.SelfAttentionSublayers` (the encoder block's too).

    Shapes: x (B, T, D) -> EncoderBlockOutput(hidden (B, T, D), self_attention (B, H, T, Tk)
    when asked for).
    """

    causal_by_default = True

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
