"""The gated feed-forward network of Llama-family blocks: SwiGLU (Shazeer 2020).

``FFN(x) = W_down (act(W_gate x) * (W_up x))``: the activated gate scales the expansion
elementwise before the contraction.  With ``act = SiLU`` this is SwiGLU, the feed-forward
layer of Llama, Qwen2 and Mistral (no biases there).
"""

from __future__ import annotations

from torch import Tensor, nn

from qkv.errors import InputError

from .feedforward import ACTIVATIONS

__all__ = ["GatedFeedForward", "GATE_ACTIVATIONS"]

#: Activations of the gate: any feed-forward activation ("silu": SwiGLU, "gelu": GeGLU).
GATE_ACTIVATIONS = ACTIVATIONS


class GatedFeedForward(nn.Module):
    """``contract(act(gate(x)) * expand(x))``, position by position.

    Shapes: x (B, T, d_model) -> (B, T, d_model); the hidden layer is (B, T, d_ff).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "silu",
        bias: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise InputError(f"dropout={dropout} must be in [0, 1)")
        if d_model < 1 or d_ff < 1:
            raise InputError(f"d_model={d_model} and d_ff={d_ff} must be positive")
        if activation not in GATE_ACTIVATIONS:
            raise InputError(
                f"gate activation {activation!r} is not one of {sorted(GATE_ACTIVATIONS)}"
            )
        self.activation_name = activation
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.expand = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = GATE_ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)  # on the hidden layer, as FeedForward's
        self.contract = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        r"""$W_\mathrm{down}\,\mathrm{dropout}(f(W_\mathrm{gate} x) \odot W_\mathrm{up} x)$.
        Shapes: x (B, T, d_model) -> (B, T, d_model)."""
        hidden = self.dropout(self.activation(self.gate(x)) * self.expand(x))  # (B, T, d_ff)
        return self.contract(hidden)  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation_name!r}"
