"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al. 2017).

source ids -> embeddings * sqrt(d_model) + positions -> encoder blocks -> memory
target ids -> embeddings * sqrt(d_model) + positions -> decoder blocks (causal self-attention,
cross-attention over memory) -> output projection -> next-token logits.

Positions come from the registry of ``qkv.layers.position_registry``: input schemes
(sinusoidal, learned, learned_concat) are added to the embeddings; attention schemes (rope,
alibi) act inside the encoder's and decoder's self-attention instead (never the
cross-attention), so the embeddings then pass on unchanged.

Masks are built once, at the top of :meth:`Transformer.encode`: the source padding mask
(B, 1, 1, S), True = may attend, is used by the encoder's self-attention and by every
cross-attention.  The decoder's self-attention is causal only: targets are right-padded, so
a real position never sees a padding position after it.

Word dropout (``config.word_dropout``, training only) zeroes whole token embeddings of the
source and the target input, never padding or BOS, before the positions are added.

Decoding (``start`` / ``step``) runs the encoder once, projects each block's cross-attention
keys/values once, and keeps a KV cache per block, so a step costs O(prefix), not O(prefix^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.functional import BlockMask, create_block_mask, padding_mask
from qkv.layers.blocks import DecoderBlock, DecoderLayerState, EncoderBlock
from qkv.layers.multihead import MultiHeadAttention
from qkv.layers.position_registry import build_attention_positions, build_input_positions

from .base import Seq2SeqOutput, StepOutput
from .checks import check_config, check_token_ids
from .registry import register_model
from .transformer_config import TransformerConfig
from .transformer_stack import TransformerDecoder, TransformerEncoder

__all__ = ["Transformer", "TransformerConfig", "TransformerState", "EncoderOutput", "DecoderOutput"]


@dataclass
class EncoderOutput:
    """memory: (B, S, D) the encoder's output.  source_mask: (B, 1, 1, S), True = real token.
    attention: per encoder block (B, H, S, S) when asked for, else None."""

    memory: Tensor
    source_mask: Tensor
    attention: list[Tensor] | None = None


@dataclass
class DecoderOutput:
    """logits: (B, T, V).  When asked for, per decoder block: self_attention (B, H, T, T),
    cross_attention (B, H, T, S); else None."""

    logits: Tensor
    self_attention: list[Tensor] | None = None
    cross_attention: list[Tensor] | None = None


@dataclass
class TransformerState:
    """What decoding carries from step to step: one state per decoder block (KV cache of the
    prefix, cross-attention K/V of the source) and the source mask (B, 1, 1, S).  Reorder it
    along the batch with ``qkv.models.select_state`` (beam search)."""

    layers: list[DecoderLayerState]
    source_mask: Tensor

    @property
    def offset(self) -> int:
        """How many target positions have been consumed: the next token's position."""
        return self.layers[0].self_cache.length


class Transformer(nn.Module):
    """Encoder-decoder Transformer for sequence-to-sequence tasks (translation).

    ``model(source, target_input)`` -> :class:`Seq2SeqOutput` with logits (B, T, V);
    ``start`` / ``step`` implement the :class:`~qkv.models.base.Decodable` protocol.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        check_config(self, config, TransformerConfig)
        self.config = config
        d_model, pad_id = config.d_model, config.pad_id
        self.embedding_scale = math.sqrt(d_model) if config.scale_embeddings else 1.0
        self.source_embedding = nn.Embedding(config.source_vocab_size, d_model, padding_idx=pad_id)
        self.target_embedding = (
            self.source_embedding
            if config.share_embeddings
            else nn.Embedding(config.target_vocab_size, d_model, padding_idx=pad_id)
        )
        # Input positions change the token vectors; attention positions (RoPE, ALiBi) act
        # inside every self-attention, as one parameter-free component all blocks share.
        positions = dict(d_model=d_model, num_heads=config.num_heads, max_len=config.max_len)
        self.source_positions = build_input_positions(
            config.positions, dropout=config.dropout, **positions
        )
        self.target_positions = build_input_positions(
            config.positions, dropout=config.dropout, **positions
        )
        block_options = dict(
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation_dropout=config.activation_dropout,
            activation=config.activation,
            norm_first=config.norm_first,
            layer_norm_eps=config.layer_norm_eps,
            positions=build_attention_positions(config.positions, **positions),
        )
        sizes = (d_model, config.num_heads, config.d_ff)
        self.encoder = TransformerEncoder(
            [EncoderBlock(*sizes, **block_options) for _ in range(config.num_encoder_layers)],
            norm=self._final_norm(),
        )
        self.decoder = TransformerDecoder(
            [DecoderBlock(*sizes, **block_options) for _ in range(config.num_decoder_layers)],
            norm=self._final_norm(),
        )
        self.output = nn.Linear(d_model, config.target_vocab_size, bias=False)
        self._init_weights()
        if config.tie_output:
            self.output.weight = self.target_embedding.weight

    def _final_norm(self) -> nn.LayerNorm | None:
        if not self.config.uses_final_norm:
            return None
        return nn.LayerNorm(self.config.d_model, eps=self.config.layer_norm_eps)

    def _init_weights(self) -> None:
        # Xavier for the blocks' matrices (as nn.Transformer); embeddings N(0, 1/d_model), so
        # that after the sqrt(d_model) scale tokens have unit variance, and a tied output
        # layer gives logits of unit variance.
        # Attention's stacked W_Q, W_K, W_V are initialised one projection at a time.
        stacked = {
            id(layer.in_proj_weight): [weight for weight, _ in layer.projections()]
            for layer in self.modules()
            if isinstance(layer, MultiHeadAttention) and layer.packed
        }
        for stack in (self.encoder, self.decoder):
            for name, parameter in stack.named_parameters():
                if parameter.dim() > 1 and "norm" not in name:
                    for part in stacked.get(id(parameter), [parameter]):
                        nn.init.xavier_uniform_(part)
        # dict.fromkeys: shared embeddings initialised once, in a fixed order (a set's order
        # follows memory addresses, so the same seed gave different weights per process)
        for embedding in dict.fromkeys((self.source_embedding, self.target_embedding)):
            nn.init.normal_(embedding.weight, std=self.config.d_model**-0.5)
            with torch.no_grad():
                embedding.weight[self.config.pad_id].zero_()

    # -- teacher forcing -------------------------------------------------------------------

    def encode(self, source: Tensor, *, need_weights: bool = False) -> EncoderOutput:
        """Shapes: source (B, S) token ids -> memory (B, S, D), source_mask (B, 1, 1, S)."""
        check_token_ids(source, "source")
        source_mask = padding_mask(source, self.config.pad_id)  # (B, 1, 1, S)
        x = self._drop_words(source, self.source_embedding(source) * self.embedding_scale)
        x = self.source_positions(x)
        mask, block_mask = source_mask, None
        if self.config.encoder_window is not None:
            mask, block_mask = self._local(source_mask, dense=need_weights)
        out = self.encoder(x, mask=mask, need_weights=need_weights, block_mask=block_mask)
        return EncoderOutput(out.hidden, source_mask, out.attention)

    def _local(self, source_mask: Tensor, *, dense: bool) -> tuple[Tensor | None, BlockMask | None]:
        """Local encoder self-attention: i sees j iff |i - j| <= encoder_window and j is a real
        token.  A block mask (blocks outside the window skipped), or the boolean (B, 1, S, S)
        mask when the weights are wanted (the flex kernel returns none)."""
        radius, real = self.config.encoder_window, source_mask[:, 0, 0]  # real: (B, S)
        batch, length = real.shape
        if dense:
            positions = torch.arange(length, device=real.device)
            near = (positions[:, None] - positions).abs() <= radius  # (S, S)
            return source_mask & near, None

        def local_mask(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return ((q_idx - kv_idx).abs() <= radius) & real[b, kv_idx]

        return None, create_block_mask(local_mask, batch, None, length, length, real.device)

    def decode(
        self,
        target_input: Tensor,
        memory: Tensor,
        source_mask: Tensor,
        *,
        need_weights: bool = False,
    ) -> DecoderOutput:
        """Shapes: target_input (B, T) ids, memory (B, S, D), source_mask (B, 1, 1, S)
        -> logits (B, T, V)."""
        check_token_ids(target_input, "target_input")
        x = self.target_embedding(target_input) * self.embedding_scale  # (B, T, D)
        x = self.target_positions(self._drop_words(target_input, x), offset=0)
        out = self.decoder(x, memory, memory_mask=source_mask, need_weights=need_weights)
        return DecoderOutput(self.output(out.hidden), out.self_attention, out.cross_attention)

    def forward(
        self, source: Tensor, target_input: Tensor, *, need_weights: bool = False
    ) -> Seq2SeqOutput:
        """Shapes: source (B, S), target_input (B, T) token ids -> logits (B, T, V).

        ``need_weights``: attention = {"encoder": per block (B, H, S, S), "decoder": per
        block (B, H, T, T), "cross": per block (B, H, T, S)}, computed without gradient
        beside the fast path (see ``MultiHeadAttention``); otherwise attention is None.
        """
        encoded = self.encode(source, need_weights=need_weights)
        decoded = self.decode(
            target_input, encoded.memory, encoded.source_mask, need_weights=need_weights
        )
        attention = None
        if need_weights:
            attention = {
                "encoder": encoded.attention,
                "decoder": decoded.self_attention,
                "cross": decoded.cross_attention,
            }
        return Seq2SeqOutput(decoded.logits, attention)

    # -- incremental decoding (the Decodable protocol) -------------------------------------

    def start(self, source: Tensor) -> TransformerState:
        """Encode once; project every block's cross-attention keys/values once; empty caches.
        Shapes: source (B, S) token ids."""
        encoded = self.encode(source)
        return TransformerState(self.decoder.start(encoded.memory), encoded.source_mask)

    def step(
        self, tokens: Tensor, state: TransformerState, *, need_attention: bool = True
    ) -> StepOutput:
        """Consume one token per sequence; score the next.

        The state's caches grow in place (keep using the returned state, which is the same
        object).  Shapes: tokens (B,) -> log_probs (B, V), attention (B, S): the last
        decoder block's cross-attention, averaged over heads; None with
        ``need_attention=False``, which keeps every block on the fused attention path.
        """
        if tokens.dim() != 1:
            raise ValueError(f"step takes one token per sequence, (B,), got {tuple(tokens.shape)}")
        if not isinstance(state, TransformerState):
            raise TypeError(f"state must come from Transformer.start, got {type(state).__name__}")
        x = self._embed_target(tokens[:, None], offset=state.offset)  # (B, 1, D)
        weights = "last" if need_attention else False  # the alignment only: others stay fused
        out = self.decoder(
            x, memory_mask=state.source_mask, states=state.layers, need_weights=weights
        )
        logits = self.output(out.hidden[:, -1])  # (B, V)
        attention = out.alignment[:, :, -1].mean(dim=1) if need_attention else None  # (B, S)
        return StepOutput(F.log_softmax(logits.float(), dim=-1), state, attention)

    def _embed_target(self, tokens: Tensor, *, offset: int) -> Tensor:
        x = self.target_embedding(tokens) * self.embedding_scale  # (B, T, D)
        return self.target_positions(x, offset=offset)

    def _drop_words(self, tokens: Tensor, embedded: Tensor) -> Tensor:
        """Word dropout: in training, each token other than padding and BOS has its whole
        embedding zeroed with probability ``config.word_dropout`` (no rescaling: a dropped
        word is absent, not a louder neighbour).  Shapes: tokens (B, T), embedded (B, T, D)."""
        rate = self.config.word_dropout
        if not self.training or rate == 0:
            return embedded
        droppable = (tokens != self.config.pad_id) & (tokens != self.config.bos_id)
        dropped = droppable & (torch.rand(tokens.shape, device=tokens.device) < rate)
        return embedded.masked_fill(dropped[..., None], 0.0)


register_model("transformer", TransformerConfig, Transformer)
