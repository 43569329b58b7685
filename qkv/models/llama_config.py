"""The configuration of the Llama-family language model (:mod:`qkv.models.llama`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from qkv.errors import InputError
from qkv.functional.rope_scaling import RopeScaling
from qkv.layers.gated_feedforward import GATE_ACTIVATIONS

from .checks import check_heads, check_positive_ints

__all__ = ["LlamaConfig"]


@dataclass(frozen=True)
class LlamaConfig:
    """Every hyper-parameter of :class:`qkv.models.llama.LlamaLM` (Llama, Qwen2, Mistral).

    vocab_size, d_model, num_layers, d_ff: vocabulary, width, blocks, SwiGLU hidden width.
    num_heads, num_kv_heads: query heads and grouped key/value heads (None = num_heads).
    max_len: the positions the checkpoint was trained for (``max_position_embeddings``);
        longer sequences are refused, except with "dynamic" RoPE scaling, made to extend.
    rope_base, rope_scaling: RoPE's ``rope_theta`` and scaling rule.
    norm_eps: epsilon of every RMSNorm.
    attention_bias: biases on the Q, K and V projections (Qwen2; Llama's attention_bias).
    output_bias: a bias on the attention output projection (Llama's attention_bias only).
    mlp_bias: biases in the feed-forward layer.
    activation: the gate activation ("silu": SwiGLU).
    tie_embeddings: the output projection reuses the token embedding matrix.
    sliding_window: each query sees only the ``sliding_window`` most recent positions
        (itself included) in the blocks of ``sliding_layers`` (None: every block); None: full
        causal attention everywhere.
    """

    vocab_size: int
    d_model: int = 256
    num_heads: int = 4
    num_kv_heads: int | None = None
    num_layers: int = 4
    d_ff: int = 688
    max_len: int = 2048
    rope_base: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    norm_eps: float = 1e-6
    attention_bias: bool = False
    output_bias: bool = False
    mlp_bias: bool = False
    activation: str = "silu"
    tie_embeddings: bool = False
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        sizes = ("vocab_size", "d_model", "num_heads", "num_kv_heads", "num_layers", "d_ff")
        check_positive_ints(self, (*sizes, "max_len"))
        check_heads(self)
        if self.head_dim % 2:
            raise InputError(f"RoPE needs an even head width, got {self.head_dim}")
        if not isinstance(self.rope_scaling, RopeScaling):
            raise InputError(f"rope_scaling must be a RopeScaling, got {self.rope_scaling!r}")
        if self.activation not in GATE_ACTIVATIONS:
            raise InputError(
                f"activation={self.activation!r} is not one of {sorted(GATE_ACTIVATIONS)}"
            )
        if self.sliding_window is not None and (
            not isinstance(self.sliding_window, int) or self.sliding_window < 1
        ):
            raise InputError(f"sliding_window={self.sliding_window!r} must be a positive integer")
        if self.sliding_layers is not None:
            object.__setattr__(self, "sliding_layers", tuple(self.sliding_layers))
            outside = [i for i in self.sliding_layers if not 0 <= i < self.num_layers]
            if outside:
                raise InputError(
                    f"sliding_layers {outside} are not blocks 0..{self.num_layers - 1}"
                )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def window_of(self, layer: int) -> int | None:
        """The sliding window of block ``layer``, None for full causal attention."""
        if self.sliding_window is None:
            return None
        if self.sliding_layers is None or layer in self.sliding_layers:
            return self.sliding_window
        return None
