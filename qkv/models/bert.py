"""A BERT encoder (Devlin et al. 2019) built from qkv's own blocks.

ids -> word + position + token-type embeddings -> LayerNorm -> dropout -> post-LN encoder
blocks (GELU) -> last_hidden_state; optionally a pooler, tanh(W h_[CLS] + b).

Its parameters are laid out so that a Hugging Face BERT checkpoint maps onto them name by
name (``qkv.pretrained.load_bert``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.functional import padding_mask
from qkv.layers.blocks import EncoderBlock
from qkv.layers.feedforward import ACTIVATIONS
from qkv.layers.positions import LearnedPositionalEmbedding

from .checks import check_config
from .registry import register_model
from .transformer_stack import TransformerEncoder

__all__ = ["BertConfig", "BertModel", "BertOutput", "BertEmbeddings"]


@dataclass(frozen=True)
class BertConfig:
    """BERT's hyper-parameters; the defaults are BERT-base (uncased).

    vocab_size, d_model (hidden size), num_layers, num_heads, d_ff (intermediate size),
    max_len (learned positions), type_vocab_size (segments A/B), activation ("gelu" is the
    exact erf form), dropout (hidden and attention), layer_norm_eps, pad_id, pooler (keep
    the [CLS] pooler layer).
    """

    vocab_size: int = 30522
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    max_len: int = 512
    type_vocab_size: int = 2
    activation: str = "gelu"
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    pad_id: int = 0
    pooler: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "max_len", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if self.num_layers < 0:
            raise ValueError(f"num_layers={self.num_layers} must be >= 0")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} is not one of {sorted(ACTIVATIONS)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(
                f"pad_id={self.pad_id} is not a token id (vocab_size={self.vocab_size})"
            )


@dataclass
class BertOutput:
    """last_hidden_state: (B, T, D).  pooler_output: (B, D) or None (no pooler).
    attention: per block (B, H, T, T) when asked for, else None."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None = None
    attention: list[Tensor] | None = None


class BertEmbeddings(nn.Module):
    """Sum of word, position and token-type (segment) embeddings, then LayerNorm and dropout.

    Shapes: input_ids (B, T), token_type_ids (B, T) or None (all segment 0) -> (B, T, D).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.d_model, padding_idx=config.pad_id
        )
        self.position_embeddings = LearnedPositionalEmbedding(config.max_len, config.d_model)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = self.position_embeddings(x)  # adds the vector of positions 0..T-1
        return self.dropout(self.norm(x))  # (B, T, D)


class BertModel(nn.Module):
    """The BERT encoder: embeddings, ``num_layers`` post-LN :class:`EncoderBlock` s, pooler.

    ``model(input_ids, attention_mask=mask)`` with Hugging Face's conventions: the
    ``attention_mask`` is (B, T) with 1 for real tokens and 0 for padding, which is qkv's
    True = may attend.  Without it, every token that is not ``pad_id`` may be attended.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        check_config(self, config, BertConfig)
        self.config = config
        self.embeddings = BertEmbeddings(config)
        block = dict(
            dropout=config.dropout,
            activation=config.activation,
            norm_first=False,
            layer_norm_eps=config.layer_norm_eps,
        )
        self.encoder = TransformerEncoder(
            EncoderBlock(config.d_model, config.num_heads, config.d_ff, **block)
            for _ in range(config.num_layers)
        )
        # The pooler: tanh(W h_[CLS] + b), trained on next-sentence prediction.
        self.pooler = nn.Linear(config.d_model, config.d_model) if config.pooler else None

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> BertOutput:
        """Shapes: input_ids (B, T); attention_mask (B, T) 1/0 or bool; token_type_ids
        (B, T) -> BertOutput(last_hidden_state (B, T, D), pooler_output (B, D))."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, T), got {tuple(input_ids.shape)}")
        if attention_mask is None:
            mask = padding_mask(input_ids, self.config.pad_id)  # (B, 1, 1, T)
        else:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(
                    f"attention_mask {tuple(attention_mask.shape)} must match input_ids "
                    f"{tuple(input_ids.shape)}"
                )
            mask = attention_mask.bool()[:, None, None, :]  # HF's 1 = attend -> (B, 1, 1, T)
        x = self.embeddings(input_ids, token_type_ids)
        out = self.encoder(x, mask=mask, need_weights=need_weights)
        pooled = (
            None if self.pooler is None else torch.tanh(self.pooler(out.hidden[:, 0]))
        )  # (B, D)
        return BertOutput(out.hidden, pooled, out.attention)


register_model("bert", BertConfig, BertModel)
