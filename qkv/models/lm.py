"""A decoder-only Transformer language model (GPT): masked self-attention, stacked (SPEC 9).

token ids -> embeddings (+ input positions) -> causal self-attention blocks -> final LayerNorm
(pre-LN) -> output projection (tied to the embeddings by default) -> next-token logits.

The blocks are qkv's :class:`~qkv.layers.EncoderBlock` run with ``causal=True``: each position
attends to itself and the positions before it.  Generation keeps one KV cache per block
(``start`` / ``step``, the step protocol the shared decoder drives), so a new token costs
O(prefix), not O(prefix^2); with grouped KV heads the cache holds only the KV heads.  With a
sliding window W the caches roll (:class:`~qkv.layers.RollingKVCache`): they keep the last
W - 1 positions only, so generation's memory and step cost are bounded by W, not the length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv.errors import InputError
from qkv.layers.blocks import EncoderBlock
from qkv.layers.cache import KVCache, RollingKVCache
from qkv.layers.multihead import MultiHeadAttention
from qkv.layers.position_registry import build_attention_positions, build_input_positions

from .base import StepOutput
from .checks import check_config
from .lm_config import TransformerLMConfig
from .lm_masks import attention_masks, find_documents
from .registry import register_model

__all__ = ["TransformerLM", "TransformerLMConfig", "LMOutput", "LMState"]


@dataclass
class LMOutput:
    """logits: (B, T, V) next-token scores.  attention: {"self": per block (B, H, T, Tk)} when
    asked for, else None.  aux_loss: always None (the trainer's field)."""

    logits: Tensor
    attention: dict[str, list[Tensor]] | None = None
    aux_loss: Tensor | None = None


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


class TransformerLM(nn.Module):
    """A GPT-style language model built from qkv's causal self-attention blocks.

    ``model(ids)`` -> :class:`LMOutput` with logits (B, T, V); ``model.loss(ids)`` the mean
    next-token cross-entropy; ``start`` / ``step`` the decoding protocol (see
    :func:`qkv.decoding.sample`).
    """

    def __init__(self, config: TransformerLMConfig):
        super().__init__()
        check_config(self, config, TransformerLMConfig)
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        # Sinusoidal encodings have unit scale; as in Vaswani et al., the token vectors are
        # multiplied by sqrt(d_model) so that the positions do not drown them.
        self.embedding_scale = config.d_model**0.5 if config.positions == "sinusoidal" else 1.0
        # Input positions (learned, sinusoidal) change the token vectors, then dropout; attention
        # positions (RoPE, ALiBi) act in every block's self-attention, one shared component.
        sizes = dict(d_model=config.d_model, num_heads=config.num_heads, max_len=config.max_len)
        self.positions = build_input_positions(config.positions, dropout=config.dropout, **sizes)
        attention_positions = build_attention_positions(config.positions, **sizes)
        self.blocks = nn.ModuleList(
            EncoderBlock(
                config.d_model,
                config.num_heads,
                config.d_ff,
                num_kv_heads=config.num_kv_heads,
                positions=attention_positions,
                dropout=config.dropout,
                activation=config.activation,
                norm_first=config.norm_first,
                layer_norm_eps=config.layer_norm_eps,
                bias=config.bias,
            )
            for _ in range(config.num_layers)
        )
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        )
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
        """The longest sequence the model can read: max_len with learned positions, else
        None (sinusoidal, RoPE and ALiBi positions extend to any length)."""
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
        logits = self.output(hidden[:, prefix:] if prefix else hidden)  # (B, T, V)
        return LMOutput(logits, {"self": weights} if need_weights else None)

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
        window = self.config.window
        state = LMState(
            [KVCache() if window is None else RollingKVCache(window) for _ in self.blocks]
        )
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
            raise TypeError(f"state must come from TransformerLM.start, got {type(state).__name__}")
        hidden, _ = self._run_blocks(tokens[:, None], state, need_weights=False)
        logits = self.output(hidden[:, -1])  # (B, V)
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
        # One new position (a decoding step) is the last one: it may attend to every key, so
        # no causal mask is needed (and none is built).
        causal = ids.shape[1] > 1
        mask, block_mask = None, None
        if config.window is not None or documents is not None:  # causal themselves
            mask, block_mask = attention_masks(
                length=ids.shape[1],
                offset=offset,
                first=0 if caches is None else caches[0].first,  # the oldest key still held
                window=config.window,
                documents=documents,
                device=x.device,
                dense=need_weights or ids.shape[1] == 1,  # the flex kernel returns no weights
            )
            causal = False
        weights = []
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
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


register_model("lm", TransformerLMConfig, TransformerLM)
