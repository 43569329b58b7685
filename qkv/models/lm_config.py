"""The configuration of the decoder-only language model (:mod:`qkv.models.lm`)."""

from __future__ import annotations

from dataclasses import dataclass

from qkv.errors import InputError
from qkv.layers.feedforward import ACTIVATIONS
from qkv.layers.position_registry import position_kind

from .checks import check_heads, check_positive_ints

__all__ = ["TransformerLMConfig", "LM_POSITION_KINDS"]

#: The position schemes of issue 13 (any scheme of ``qkv.layers.position_registry`` works):
#: learned and sinusoidal change the token vectors; rope and alibi act in every attention.
LM_POSITION_KINDS = ("learned", "sinusoidal", "rope", "alibi")


@dataclass(frozen=True)
class TransformerLMConfig:
    """Every hyper-parameter of :class:`qkv.models.lm.TransformerLM`.

    vocab_size: token vocabulary (the four special ids of qkv's tokenizers included).
    d_model, num_heads, d_ff: width, query heads (``d_model % num_heads == 0``), feed-forward
        width.  num_kv_heads: key/value heads (None = num_heads; fewer = grouped-query
        attention, 1 = multi-query); the KV cache holds only these.
    num_layers: causal self-attention blocks.
    max_len: the longest sequence learned positions cover (others extend past it).
    dropout: on embeddings, residual branches, attention weights, the feed-forward layer.
    positions: a registered position scheme (``LM_POSITION_KINDS``: learned, sinusoidal, rope,
        alibi); learned positions stop at max_len, the others extend past it.
    norm_first: pre-LN blocks and a final LayerNorm (GPT-2); False = post-LN (the paper).
    activation: "gelu" (default), "gelu_tanh" (GPT-2) or "relu".
    tie_embeddings: the output projection reuses the token embedding matrix.
    bias: biases in the attention and feed-forward projections.
    layer_norm_eps: epsilon of every LayerNorm.
    window: None (full causal attention) or W: each position attends to the W most recent
        positions, itself included (Mistral's sliding window), on the flex kernel, which
        skips the blocks outside the window (and drops no attention weights: ``dropout``
        still applies to embeddings, residual branches and the feed-forward layer).
    document_start: None (one stream) or the token id that opens every document of a packed
        window (qkv's tokenizers: 1, ``<s>``): each position attends only to its own
        document, from the latest such token at or before it, and its input position counts
        from there (:mod:`qkv.models.lm_masks`).
    """

    vocab_size: int
    d_model: int = 256
    num_heads: int = 4
    num_kv_heads: int | None = None
    num_layers: int = 4
    d_ff: int = 1024
    max_len: int = 256
    dropout: float = 0.1
    positions: str = "learned"
    norm_first: bool = True
    activation: str = "gelu"
    tie_embeddings: bool = True
    bias: bool = True
    layer_norm_eps: float = 1e-5
    window: int | None = None
    document_start: int | None = None

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        check_positive_ints(
            self, ("vocab_size", "d_model", "num_heads", "num_kv_heads", "num_layers", "d_ff")
        )
        if not isinstance(self.max_len, int) or self.max_len < 1:
            raise InputError(f"max_len={self.max_len!r} must be a positive integer")
        check_heads(self)
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"dropout={self.dropout} must be in [0, 1)")
        if self.activation not in ACTIVATIONS:
            raise InputError(f"activation={self.activation!r} is not one of {sorted(ACTIVATIONS)}")
        position_kind(self.positions)  # InputError naming the registered schemes
        if self.window is not None and (
            not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1
        ):
            raise InputError(
                f"window={self.window!r} must be a positive number of positions (e.g. 256), "
                "or None for full causal attention"
            )
        if self.document_start is not None and (
            not isinstance(self.document_start, int)
            or isinstance(self.document_start, bool)
            or not 0 <= self.document_start < self.vocab_size
        ):
            raise InputError(
                f"document_start={self.document_start!r} must be a token id in "
                f"0..{self.vocab_size - 1} (qkv's <s> is 1), or None for one stream"
            )

    @property
    def head_dim(self) -> int:
        """Dh = d_model / num_heads."""
        return self.d_model // self.num_heads
