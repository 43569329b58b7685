"""A Llama-family decoder-only language model (Llama, Qwen2, Mistral) from qkv's layers.

token ids -> embeddings -> blocks -> final RMSNorm -> output projection -> next-token logits,
each block pre-norm:

    x = x + SelfAttention(RMSNorm(x))     # causal, RoPE on Q and K, grouped KV heads
    x = x + SwiGLU(RMSNorm(x))

The attention is qkv's :class:`~qkv.layers.MultiHeadAttention` with a
:class:`~qkv.layers.scaled_rotary.ScaledRotaryEmbedding` (the checkpoint's rope_theta and
scaling), so it runs on qkv's fast backends and returns its weights when asked.  A sliding
window (Mistral; Qwen2's upper layers) is a boolean mask built once per call: query ``i``
sees keys ``i - window < j <= i``.  Generation keeps one KV cache per block, as
:class:`~qkv.models.lm.TransformerLM` does, and follows the same ``start`` / ``step``
protocol, so :func:`qkv.decoding.sample` and ``qkv.tasks.lm.generate_text`` drive it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.layers.blocks import EncoderBlockOutput
from qkv.layers.cache import KVCache
from qkv.layers.gated_feedforward import GatedFeedForward
from qkv.layers.multihead import MultiHeadAttention
from qkv.layers.scaled_rotary import ScaledRotaryEmbedding

from .base import StepOutput
from .checks import check_config
from .llama_config import LlamaConfig
from .lm import LMOutput, LMState, _check_ids, next_token_loss
from .registry import register_model

__all__ = ["LlamaLM", "LlamaBlock", "LlamaConfig", "sliding_window_mask"]

# RoPE tables beyond this many positions are computed when needed, not stored.
_ROPE_TABLE_LEN = 8192


def sliding_window_mask(
    query_len: int, key_len: int, window: int, *, device: torch.device | str | None = None
) -> Tensor:
    """Causal attention within a window: query ``i`` may attend to key ``j`` iff
    ``0 <= i - j < window`` (itself and the ``window - 1`` positions before it).  The queries
    are the last ``query_len`` of the ``key_len`` positions (end-aligned, as
    :func:`qkv.functional.causal_mask`).  Shapes: -> (Tq, Tk), True = may attend."""
    rows = torch.arange(key_len - query_len, key_len, device=device)[:, None]
    distance = rows - torch.arange(key_len, device=device)[None, :]  # (Tq, Tk)
    return (distance >= 0) & (distance < window)


class LlamaBlock(nn.Module):
    """RMSNorm -> causal self-attention -> residual; RMSNorm -> SwiGLU -> residual.

    Shapes: x (B, T, D), mask broadcastable to (B, H, T, Tk) (True = may attend) ->
    EncoderBlockOutput(hidden (B, T, D), self_attention (B, H, T, Tk) when asked for).
    """

    def __init__(self, config: LlamaConfig, positions: ScaledRotaryEmbedding):
        super().__init__()
        d_model = config.d_model
        self.self_attention_norm = nn.RMSNorm(d_model, eps=config.norm_eps)
        self.self_attention = MultiHeadAttention(
            d_model,
            config.num_heads,
            num_kv_heads=config.num_kv_heads,
            bias=config.attention_bias,
            positions=positions,
        )
        if config.output_bias != config.attention_bias:
            # Qwen2 biases Q, K and V but not the output projection: one Linear replaced.
            self.self_attention.out_proj = nn.Linear(d_model, d_model, bias=config.output_bias)
        self.feed_forward_norm = nn.RMSNorm(d_model, eps=config.norm_eps)
        self.feed_forward = GatedFeedForward(
            d_model, config.d_ff, activation=config.activation, bias=config.mlp_bias
        )

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = True,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> EncoderBlockOutput:
        attended, weights = self.self_attention(
            self.self_attention_norm(x),
            mask=mask,
            causal=causal,
            cache=cache,
            need_weights=need_weights,
        )
        x = x + attended
        x = x + self.feed_forward(self.feed_forward_norm(x))
        return EncoderBlockOutput(x, weights)


class LlamaLM(nn.Module):
    """A Llama / Qwen2 / Mistral language model built from qkv's layers.

    ``model(ids)`` -> :class:`~qkv.models.lm.LMOutput` with logits (B, T, V) (and the
    attention of every block with ``need_weights=True``: ``{"self": [(B, H, T, T), ...]}``);
    ``model.loss(ids)`` the mean next-token cross-entropy; ``start`` / ``step`` the decoding
    protocol of :func:`qkv.decoding.sample`.
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        check_config(self, config, LlamaConfig)
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        # One rotary component shared by every block (it has no parameters).
        self.positions = ScaledRotaryEmbedding(
            config.head_dim,
            base=config.rope_base,
            scaling=config.rope_scaling,
            max_len=min(config.max_len, _ROPE_TABLE_LEN),
        )
        self.blocks = nn.ModuleList(
            LlamaBlock(config, self.positions) for _ in range(config.num_layers)
        )
        self.windows = [config.window_of(i) for i in range(config.num_layers)]
        self.final_norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.token_embedding.weight

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model reads: max_len, or None with "dynamic" RoPE
        scaling, whose frequencies stretch with the length."""
        return None if self.config.rope_scaling.depends_on_length else self.config.max_len

    def forward(self, ids: Tensor, *, need_weights: bool = False) -> LMOutput:
        """Shapes: ids (B, T) -> logits (B, T, V), row t scoring the token after ids[:, t]."""
        _check_ids(ids, "ids", self.config.vocab_size)
        hidden, weights = self._run_blocks(ids, caches=None, need_weights=need_weights)
        return LMOutput(self.output(hidden), {"self": weights} if need_weights else None)

    def loss(self, ids: Tensor, *, pad_id: int | None = None) -> Tensor:
        """Mean cross-entropy of predicting ids[:, 1:] from ids[:, :-1] (``pad_id`` targets
        are ignored; None ignores nothing).  Shapes: ids (B, T), T >= 2 -> ()."""
        return next_token_loss(self, ids, pad_id)

    def start(self, prefix: Tensor) -> LMState:
        """Read ``prefix`` (B, S) into fresh KV caches in one pass (S may be 0)."""
        _check_ids(prefix, "prefix", self.config.vocab_size, allow_empty=True)
        state = LMState([KVCache() for _ in self.blocks])
        if prefix.shape[1] > 0:
            self._run_blocks(prefix, caches=state.caches, need_weights=False)
        return state

    def step(self, tokens: Tensor, state: LMState, *, need_attention: bool = False) -> StepOutput:
        """Consume one token per sequence; score the next.  The caches grow in place.
        Shapes: tokens (B,) -> log_probs (B, V) in float32; attention None."""
        if tokens.dim() != 1:
            raise InputError(f"step takes one token per sequence, (B,), got {tuple(tokens.shape)}")
        if not isinstance(state, LMState):
            raise TypeError(f"state must come from LlamaLM.start, got {type(state).__name__}")
        hidden, _ = self._run_blocks(tokens[:, None], caches=state.caches, need_weights=False)
        logits = self.output(hidden[:, -1])  # (B, V)
        return StepOutput(F.log_softmax(logits.float(), dim=-1), state, None)

    def _run_blocks(
        self, ids: Tensor, *, caches: list[KVCache] | None, need_weights: bool
    ) -> tuple[Tensor, list[Tensor]]:
        """Shapes: ids (B, T) after the caches' positions -> hidden (B, T, D), weights."""
        past = 0 if caches is None else caches[0].length
        num_queries, num_keys = ids.shape[1], past + ids.shape[1]
        self._check_length(num_keys)
        # One new position (a decoding step) may attend to every earlier key: no causal mask.
        causal = num_queries > 1
        masks = {
            window: sliding_window_mask(num_queries, num_keys, window, device=ids.device)
            for window in set(self.windows)
            if window is not None and window < num_keys
        }
        x = self.token_embedding(ids)  # (B, T, D)
        weights = []
        for index, block in enumerate(self.blocks):
            out = block(
                x,
                mask=masks.get(self.windows[index]),
                causal=causal,
                cache=None if caches is None else caches[index],
                need_weights=need_weights,
            )
            x = out.hidden
            if need_weights:
                weights.append(out.self_attention)
        return self.final_norm(x), weights

    def _check_length(self, length: int) -> None:
        if self.max_positions is not None and length > self.max_positions:
            raise InputError(
                f"a sequence of {length} tokens is longer than the {self.max_positions} "
                "positions this model was trained for (max_position_embeddings); give at most "
                f"{self.max_positions} tokens (qkv.decoding.sample slides a window)"
            )


register_model("llama", LlamaConfig, LlamaLM)
