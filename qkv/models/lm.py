"""qkv's decoder-only language model: masked self-attention, stacked (SPEC 9), built from components.

token ids -> embeddings (+ input positions) -> blocks of causal self-attention and a
feed-forward layer -> final norm (pre-norm) -> output projection -> next-token logits.

One class for every architecture: each block (:class:`~qkv.layers.lm_block.LMBlock`) is
assembled from the components :class:`~qkv.models.lm_config.LMConfig` names -- the norm
(LayerNorm, RMSNorm, parameter-free RMSNorm), the feed-forward layer (GELU / ReLU^2 MLP,
SwiGLU), the positions (learned, sinusoidal, RoPE with theta and scaling, ALiBi), QK-norm,
biases, tied or untied output, logit soft-capping, and a per-layer attention pattern (full
causal or a sliding window, every window on the flex kernel).  GPT, Llama and nanochat-style
models are builders of it (:mod:`qkv.models.lm_builders`); Hugging Face GPT-2, Llama, Qwen2
and Mistral folders load into it (:mod:`qkv.pretrained`) and it exports back
(:mod:`qkv.pretrained.export`).

Generation keeps one KV cache per block (``start`` / ``step``, the step protocol the shared
decoder drives), so a new token costs O(prefix), not O(prefix^2); with grouped KV heads the
cache holds only the KV heads.  A windowed block's cache rolls
(:class:`~qkv.layers.RollingKVCache`): it keeps the last W - 1 positions only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.functional.block_mask import BlockMask
from qkv.layers.attention_positions import AttentionPositions
from qkv.layers.cache import KVCache, RollingKVCache
from qkv.layers.feedforward import FeedForward
from qkv.layers.gated_feedforward import GatedFeedForward
from qkv.layers.lm_block import LMBlock
from qkv.layers.multihead import MultiHeadAttention
from qkv.layers.position_registry import build_attention_positions, build_input_positions
from qkv.layers.scaled_rotary import ScaledRotaryEmbedding

from .base import LMOutput, StepOutput
from .checks import check_config
from .lm_config import LMConfig
from .lm_masks import attention_masks, find_documents
from .registry import register_model

__all__ = ["DecoderLM", "LMConfig", "LMOutput", "LMState"]

# RoPE tables beyond this many positions are computed when needed, not stored.
_ROPE_TABLE_LEN = 8192


@dataclass
class LMState:
    """What generation carries from step to step: one KV cache per block, and (packed
    documents) the position where each row's current document started, (B,).  Reorder it
    along the batch with ``qkv.models.select_state`` (its caches have ``select``)."""

    caches: list[KVCache | RollingKVCache]
    document: Tensor | None = None

    @property
    def offset(self) -> int:
        """How many positions have been consumed: the next token's position."""
        return self.caches[0].length


class DecoderLM(nn.Module):
    """A decoder-only language model built from the components its config names.

    ``model(ids)`` -> :class:`LMOutput` with logits (B, T, V); ``model.loss(ids)`` the mean
    next-token cross-entropy; ``start`` / ``step`` the decoding protocol (see
    :func:`qkv.decoding.sample`).  Build one with an architecture's builder
    (:func:`qkv.models.gpt`, :func:`qkv.models.llama`) or from an :class:`LMConfig`.
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        check_config(self, config, LMConfig)
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        # Sinusoidal encodings have unit scale; as in Vaswani et al., the token vectors are
        # multiplied by sqrt(d_model) so that the positions do not drown them.
        self.embedding_scale = config.d_model**0.5 if config.positions == "sinusoidal" else 1.0
        # Input positions (learned, sinusoidal) change the token vectors, then dropout; attention
        # positions (RoPE, ALiBi) act in every block's self-attention, one shared component.
        self.positions, attention_positions = _positions(config)
        self.embedding_norm = _norm(config) if config.embedding_norm else None
        self.blocks = nn.ModuleList(
            LMBlock(
                self_attention=MultiHeadAttention(
                    config.d_model,
                    config.num_heads,
                    num_kv_heads=config.num_kv_heads,
                    bias=config.bias,
                    output_bias=config.output_bias,
                    dropout=config.dropout,
                    positions=attention_positions,
                    query_norm=_head_norm(config) if config.qk_norm else None,
                    key_norm=_head_norm(config) if config.qk_norm else None,
                ),
                feed_forward=_feed_forward(config),
                self_attention_norm=_norm(config),
                feed_forward_norm=_norm(config),
                dropout=config.dropout,
                norm_first=config.norm_first,
            )
            for _ in range(config.num_layers)
        )
        self.windows = config.windows
        self.final_norm = _norm(config) if config.norm_first else None
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.output.weight = self.token_embedding.weight

    def _init_weights(self) -> None:
        # GPT-2's scheme: N(0, 0.02) everywhere, residual output projections scaled down by
        # sqrt(2 * num_layers) so the residual stream's variance does not grow with depth.
        residual_std = 0.02 / (2 * self.config.num_layers) ** 0.5
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = residual_std if name.endswith(("out_proj", "contract")) else 0.02
                parts = [(module.weight, module.bias)]
            elif isinstance(module, MultiHeadAttention) and module.packed:
                std, parts = 0.02, module.projections()  # W_Q, W_K, W_V one at a time
            else:
                continue
            for weight, bias in parts:
                nn.init.normal_(weight, std=std)
                if bias is not None:
                    nn.init.zeros_(bias)
        nn.init.normal_(self.token_embedding.weight, std=0.02)

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model can read: the config's position_limit (a pretrained
        folder's max_position_embeddings), else max_len with learned positions, else None
        (sinusoidal, RoPE and ALiBi positions extend to any length)."""
        if self.config.position_limit is not None:
            return self.config.position_limit
        return getattr(self.positions, "max_len", None)

    # -- teacher forcing -------------------------------------------------------------------

    def forward(
        self, ids: Tensor, target_input: Tensor | None = None, *, need_weights: bool = False
    ) -> LMOutput:
        """Shapes: ids (B, T) -> logits (B, T, V), row t scoring the token after ids[:, t].

        ``target_input`` (B, T'): the shared trainer's ``model(source, target_input)`` call;
        ``ids`` is then a prefix (possibly empty, (B, 0)) read before ``target_input``, and
        the logits are those of the target_input positions only, (B, T', V).
        """
        prefix = 0
        if target_input is not None:
            _check_ids(target_input, "target_input", self.config.vocab_size)
            _check_ids(ids, "ids", self.config.vocab_size, allow_empty=True)
            prefix = ids.shape[1]
            ids = torch.cat([ids, target_input.to(ids.dtype)], dim=1)
        else:
            _check_ids(ids, "ids", self.config.vocab_size)
        hidden, weights = self._run_blocks(ids, None, need_weights=need_weights)
        logits = self.logits(hidden[:, prefix:] if prefix else hidden)  # (B, T, V)
        return LMOutput(logits, {"self": weights} if need_weights else None)

    def get_output_embeddings(self) -> nn.Linear:
        """The output layer (transformers' name for it): optimizers that treat the hidden
        layers' matrices apart, such as Muon, leave it to AdamW."""
        return self.output

    def logits(self, hidden: Tensor) -> Tensor:
        """The output projection, soft-capped when the config says so (c * tanh(z / c)).
        Shapes: hidden (..., D) -> (..., V)."""
        logits = self.output(hidden)
        cap = self.config.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def loss(self, ids: Tensor, *, pad_id: int | None = 0) -> Tensor:
        """Mean cross-entropy of predicting ids[:, 1:] from ids[:, :-1] (``pad_id`` targets
        are ignored; None ignores nothing).  Shapes: ids (B, T), T >= 2 -> ()."""
        return next_token_loss(self, ids, pad_id)

    def context_parallel(self, group=None) -> nn.Module:
        """This model with each training window spread over the ranks of ``group`` (ring
        attention; see :class:`~qkv.models.lm_parallel.ContextParallelLM`)."""
        from .lm_parallel import ContextParallelLM  # it builds on this module

        return ContextParallelLM(self, group)

    # -- incremental decoding --------------------------------------------------------------

    def start(self, prefix: Tensor) -> LMState:
        """Read ``prefix`` (B, S) into fresh KV caches, all positions in one pass (S may be 0).

        Generation then calls :meth:`step` with each next token, the prompt's last token
        first, so ``start(prompt[:, :-1])`` + ``step(prompt[:, -1])`` scores what follows."""
        _check_ids(prefix, "prefix", self.config.vocab_size, allow_empty=True)
        state = LMState([KVCache() if w is None else RollingKVCache(w) for w in self.windows])
        if self.config.document_start is not None:
            state.document = prefix.new_zeros(prefix.shape[0])  # position 0 opens the first
        if prefix.shape[1] > 0:
            self._run_blocks(prefix, state, need_weights=False)
        return state

    def step(self, tokens: Tensor, state: LMState, *, need_attention: bool = False) -> StepOutput:
        """Consume one token per sequence; score the next.  The caches grow in place.

        Shapes: tokens (B,) -> log_probs (B, V) in float32; attention is None (a language
        model has no source to align with)."""
        if tokens.dim() != 1:
            raise InputError(f"step takes one token per sequence, (B,), got {tuple(tokens.shape)}")
        if not isinstance(state, LMState):
            raise TypeError(f"state must come from DecoderLM.start, got {type(state).__name__}")
        hidden, _ = self._run_blocks(tokens[:, None], state, need_weights=False)
        logits = self.logits(hidden[:, -1])  # (B, V)
        return StepOutput(F.log_softmax(logits.float(), dim=-1), state, None)

    # -- the stack -------------------------------------------------------------------------

    def _run_blocks(
        self, ids: Tensor, state: LMState | None, *, need_weights: bool
    ) -> tuple[Tensor, list[Tensor]]:
        """Shapes: ids (B, T) at positions offset.. (after the state's) -> hidden (B, T, D),
        weights per block.  The state's caches (and current documents) advance in place."""
        config = self.config
        caches = None if state is None else state.caches
        offset = 0 if state is None else state.offset
        self.check_length(offset + ids.shape[1])
        documents = None
        if config.document_start is not None:  # packed documents: positions restart at each
            origin = ids.new_zeros(ids.shape[0]) if state is None else state.document
            documents = find_documents(ids, config.document_start, offset=offset, origin=origin)
            x = self.embed(ids, positions=documents.positions)  # (B, T, D)
            if state is not None:
                state.document = documents.starts[:, -1]
        else:
            x = self.embed(ids, offset=offset)  # (B, T, D)
        if self.embedding_norm is not None:
            x = self.embedding_norm(x)
        # One new position (a decoding step) is the last one: it may attend to every key, so
        # no causal mask is needed (and none is built).  Windows and documents need a mask
        # (causal itself), one per distinct window and first key held, shared by the blocks.
        masks: dict[tuple[int | None, int], tuple[Tensor | None, BlockMask | None]] = {}
        weights = []
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            window = self.windows[index]
            mask, block_mask, causal = None, None, ids.shape[1] > 1
            if window is not None or documents is not None:
                first = 0 if cache is None else cache.first  # the oldest key still held
                if (window, first) not in masks:
                    masks[window, first] = attention_masks(
                        length=ids.shape[1],
                        offset=offset,
                        first=first,
                        window=window,
                        documents=documents,
                        device=x.device,
                        dense=need_weights or ids.shape[1] == 1,  # flex returns no weights
                    )
                (mask, block_mask), causal = masks[window, first], False
            out = block(
                x,
                mask=mask,
                causal=causal,
                cache=cache,
                need_weights=need_weights,
                block_mask=block_mask,
            )
            x = out.hidden
            if need_weights:
                weights.append(out.self_attention)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, weights

    def embed(self, ids: Tensor, *, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """The blocks' input: token embeddings (scaled) plus the input positions of
        ``offset``.. (or ``positions`` (B, T): packed documents restart them), dropout
        included.  Shapes: ids (B, T) -> (B, T, D)."""
        x = self.token_embedding(ids)  # (B, T, D)
        if self.embedding_scale != 1.0:
            x = x * self.embedding_scale
        if positions is not None:
            return self.positions(x, positions=positions)  # (B, T, D)
        return self.positions(x, offset=offset)  # (B, T, D)

    def check_length(self, length: int) -> None:
        """InputError if a sequence of ``length`` tokens needs positions the model lacks."""
        if self.config.position_limit is not None and length > self.config.position_limit:
            raise InputError(
                f"a sequence of {length} tokens is longer than the {self.max_positions} "
                "positions this model was trained for (max_position_embeddings); give at most "
                f"{self.max_positions} tokens (qkv.decoding.sample slides a window)"
            )
        if self.max_positions is not None and length > self.max_positions:
            raise InputError(
                f"a sequence of {length} tokens needs positions up to {length - 1}, but this "
                f"model learned only max_len={self.config.max_len} positions (positions="
                "'learned'); give at most max_len tokens (qkv.decoding.sample slides a window), "
                "or train with positions 'sinusoidal', 'rope' or 'alibi', which extend past "
                "max_len",
                fields=("positions",),
            )


def _check_ids(ids: Tensor, name: str, vocab_size: int, *, allow_empty: bool = False) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise InputError(f"{name} must be token ids of shape (B, T), got {shape}")
    if ids.dtype not in (torch.long, torch.int32):
        raise InputError(f"{name} must hold integer token ids, got {ids.dtype}")
    if ids.shape[1] == 0 and not allow_empty:
        raise InputError(f"{name} is empty (length 0): give at least one token")
    if not ids.numel():
        return
    low, high = (int(bound) for bound in torch.aminmax(ids))  # one pass, one sync
    if low < 0 or high >= vocab_size:
        raise InputError(
            f"{name} holds ids outside the vocabulary 0..{vocab_size - 1} (min {low}, max {high})"
        )


def next_token_loss(model: nn.Module, ids: Tensor, pad_id: int | None) -> Tensor:
    """A language model's loss: the mean cross-entropy of ``model(ids[:, :-1]).logits``
    against ``ids[:, 1:]``, ``pad_id`` targets ignored (None ignores nothing).  Shapes: ids
    (B, T), T >= 2 -> ()."""
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise InputError(f"loss needs ids (B, T) with T >= 2, got {tuple(ids.shape)}")
    logits = model(ids[:, :-1]).logits  # (B, T-1, V)
    ignore = -100 if pad_id is None else pad_id
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten(), ignore_index=ignore)


def _positions(config: LMConfig) -> tuple[nn.Module, AttentionPositions | None]:
    """(what the token vectors get, what every self-attention gets): an input scheme and
    None, or dropout only and the attention scheme shared by every block."""
    sizes = dict(d_model=config.d_model, num_heads=config.num_heads, max_len=config.max_len)
    embed = build_input_positions(config.positions, dropout=config.dropout, **sizes)
    if config.positions == "rope":  # with the config's theta and scaling rule
        rope = ScaledRotaryEmbedding(
            config.head_dim,
            base=config.rope_base,
            scaling=config.rope_scaling,
            max_len=min(config.max_len, _ROPE_TABLE_LEN),
        )
        return embed, rope
    return embed, build_attention_positions(config.positions, **sizes)


def _norm(config: LMConfig, width: int | None = None) -> nn.Module:
    """The config's norm component over ``width`` features (default d_model)."""
    width = config.d_model if width is None else width
    if config.norm == "layer":
        return nn.LayerNorm(width, eps=config.norm_eps, bias=config.bias)
    return nn.RMSNorm(width, eps=config.norm_eps, elementwise_affine=config.norm == "rms")


def _head_norm(config: LMConfig) -> nn.Module:
    """QK-norm: the config's norm over one head's Dh features."""
    return _norm(config, config.head_dim)


def _feed_forward(config: LMConfig) -> nn.Module:
    """The config's feed-forward component: an MLP or a gated one (SwiGLU)."""
    bias = config.bias if config.mlp_bias is None else config.mlp_bias
    kind = GatedFeedForward if config.feed_forward == "gated" else FeedForward
    return kind(
        config.d_model, config.d_ff, activation=config.activation, bias=bias, dropout=config.dropout
    )


def _upgrade(config: dict, shapes: Mapping[str, tuple[int, ...]]) -> dict:
    """A config saved before the one-LM config (2026-12-07) named the norms' epsilon
    ``layer_norm_eps``; it is ``norm_eps`` now."""
    if "layer_norm_eps" in config:
        config["norm_eps"] = config.pop("layer_norm_eps")
    return config


register_model("lm", LMConfig, DecoderLM, upgrade=_upgrade)
