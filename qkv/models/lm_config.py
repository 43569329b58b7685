"""The configuration of qkv's one decoder-only language model (:mod:`qkv.models.lm`).

Every field is either a size or the name of a component the model builds its blocks from;
the architectures (GPT, Llama, nanochat-style) are sets of component choices, kept in
:mod:`qkv.models.lm_builders`.  The per-layer attention pattern is one rule,
:meth:`LMConfig.window_of`, read by the model, its KV caches, the explorer and the exporter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from qkv.errors import InputError
from qkv.functional.rope_scaling import RopeScaling
from qkv.layers.feedforward import ACTIVATIONS
from qkv.layers.position_registry import position_kind

from .checks import check_heads, check_positive_ints

__all__ = ["LMConfig", "LM_POSITION_KINDS", "NORMS", "FEED_FORWARDS", "window_layers_of"]

#: The position schemes: learned and sinusoidal change the token vectors; rope (with
#: ``rope_base`` and ``rope_scaling``) and alibi act in every attention.
LM_POSITION_KINDS = ("learned", "sinusoidal", "rope", "alibi")
#: Norm components: LayerNorm (GPT-2), RMSNorm (Llama), RMSNorm without a weight (nanochat).
NORMS = ("layer", "rms", "rms_free")
#: Feed-forward components: an MLP (expand, activation, contract: GELU for GPT-2, ReLU^2
#: for nanochat) or a gated one (SwiGLU with activation "silu": Llama).
FEED_FORWARDS = ("mlp", "gated")


@dataclass(frozen=True)
class LMConfig:
    """Every hyper-parameter of :class:`qkv.models.lm.DecoderLM`.

    Sizes. vocab_size; d_model, num_heads (``d_model % num_heads == 0``), num_kv_heads
        (None = num_heads; fewer = grouped-query attention, the KV cache holds only these);
        num_layers; d_ff (the feed-forward's hidden width); max_len (the longest sequence
        learned positions cover, and the table length of RoPE's cos/sin).
    dropout: on embeddings, residual branches, attention weights and the feed-forward's
        hidden layer (the flex kernel, which windows run on, drops no attention weights).
    Components. positions: "learned", "sinusoidal", "rope" or "alibi"; rope_base and
        rope_scaling: RoPE's theta and scaling rule.  norm: "layer", "rms" or "rms_free";
        norm_eps: every norm's epsilon.  feed_forward: "mlp" or "gated"; activation: its
        activation ("gelu", "gelu_tanh", "relu", "relu2", "silu").  norm_first: pre-norm blocks
        and a final norm (GPT-2, Llama); False = post-norm (the paper).  qk_norm: normalise
        each head's queries and keys (after RoPE) with the ``norm`` component.
        embedding_norm: normalise the token embeddings before the first block (nanochat).
    Biases. bias: on the Q, K, V projections and in the LayerNorms; output_bias: on the
        attention output (None: as bias); mlp_bias: in the feed-forward (None: as bias).
    Output. tie_embeddings: the output projection reuses the embedding matrix;
        logit_softcap: None, or c: logits become c * tanh(logits / c) (Gemma 2, nanochat).
    Pattern. window: None (full causal attention) or W: a query sees the W most recent
        positions, itself included, on the flex kernel (blocks outside it are skipped);
        window_layers: the blocks that use it (None: every block).  Build them from a pattern
        string with :func:`window_layers_of` ("SSSL": short windows, every fourth layer full).
    document_start: None (one stream) or the token id that opens every document of a packed
        window: each position attends only inside its document, and its input position
        counts from the document's start (:mod:`qkv.models.lm_masks`).
    position_limit: the longest sequence the model may read (None: what its positions
        allow -- max_len for learned ones, any length for the others).  A pretrained folder
        sets its ``max_position_embeddings`` here.
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
    rope_base: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    norm: str = "layer"
    norm_eps: float = 1e-5
    feed_forward: str = "mlp"
    activation: str = "gelu"
    norm_first: bool = True
    qk_norm: bool = False
    embedding_norm: bool = False
    bias: bool = True
    output_bias: bool | None = None
    mlp_bias: bool | None = None
    tie_embeddings: bool = True
    logit_softcap: float | None = None
    window: int | None = None
    window_layers: tuple[int, ...] | None = None
    document_start: int | None = None
    position_limit: int | None = None

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if isinstance(self.rope_scaling, Mapping):  # a saved config: asdict wrote it out
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.window_layers is not None:
            object.__setattr__(self, "window_layers", tuple(self.window_layers))
        check_positive_ints(
            self,
            ("vocab_size", "d_model", "num_heads", "num_kv_heads", "num_layers", "d_ff", "max_len"),
        )
        check_heads(self)
        if self.position_limit is not None:
            check_positive_ints(self, ("position_limit",))
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"dropout={self.dropout} must be in [0, 1)")
        position_kind(self.positions)  # InputError naming the registered schemes
        if self.positions == "rope" and self.head_dim % 2:
            raise InputError(f"RoPE needs an even head width, got {self.head_dim}")
        if not isinstance(self.rope_scaling, RopeScaling):
            raise InputError(f"rope_scaling must be a RopeScaling, got {self.rope_scaling!r}")
        for name, choices in (("norm", NORMS), ("feed_forward", FEED_FORWARDS)):
            if getattr(self, name) not in choices:
                raise InputError(f"{name}={getattr(self, name)!r} is not one of {list(choices)}")
        if self.activation not in ACTIVATIONS:
            raise InputError(f"activation={self.activation!r} is not one of {sorted(ACTIVATIONS)}")
        if self.logit_softcap is not None and not self.logit_softcap > 0:
            raise InputError(f"logit_softcap={self.logit_softcap!r} must be > 0 (or None)")
        if self.window is not None and (
            not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1
        ):
            raise InputError(
                f"window={self.window!r} must be a positive number of positions (e.g. 256), "
                "or None for full causal attention"
            )
        if self.window_layers is not None:
            outside = [i for i in self.window_layers if not 0 <= i < self.num_layers]
            if outside:
                raise InputError(f"window_layers {outside} are not blocks 0..{self.num_layers - 1}")
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

    def window_of(self, layer: int) -> int | None:
        """The sliding window of block ``layer``, None for full causal attention."""
        if self.window is None:
            return None
        if self.window_layers is None or layer in self.window_layers:
            return self.window
        return None

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Every block's window (None: full causal), in order."""
        return tuple(self.window_of(i) for i in range(self.num_layers))

    def replace(self, **fields: Any) -> LMConfig:
        """A copy with ``fields`` changed (checked again)."""
        return dataclasses.replace(self, **fields)


def window_layers_of(pattern: str, num_layers: int) -> tuple[int, ...]:
    """The blocks a window pattern gives short windows to: ``pattern`` is a string of "S"
    (short: the sliding window) and "L" (long: full causal attention), tiled over the
    layers, and the last layer is always full (nanochat's and Gemma's layouts: "SSSL" on 8
    layers -> windows on 0, 1, 2, 4, 5, 6)."""
    if not pattern or set(pattern.upper()) - {"S", "L"}:
        raise InputError(
            f"window pattern {pattern!r} must be letters S (a sliding window) and L (full "
            "attention), e.g. 'SSSL'"
        )
    letters = pattern.upper()
    return tuple(i for i in range(num_layers - 1) if letters[i % len(letters)] == "S")
