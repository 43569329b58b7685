"""The gated feed-forward network of Llama-family blocks: SwiGLU (Shazeer 2020).

``FFN(x) = W_down (act(W_gate x) * (W_up x))``: the activated gate scales the expansion
elementwise before the contraction.  With ``act = SiLU`` this is SwiGLU, the feed-forward
layer of Llama, Qwen2 and Mistral (no biases there).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from qkv.errors import InputError

__all__ = ["GatedFeedForward", "GATE_ACTIVATIONS"]

#: Activations of the gate: "silu" (SwiGLU), "gelu" / "gelu_tanh" (GeGLU).
GATE_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "silu": nn.SiLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
}


class GatedFeedForward(nn.Module):
    """``contract(act(gate(x)) * expand(x))``, position by position.

    Shapes: x (B, T, d_model) -> (B, T, d_model); the hidden layer is (B, T, d_ff).
    """

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "silu", bias: bool = False):
        super().__init__()
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
        self.contract = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.gate(x)) * self.expand(x)  # (B, T, d_ff)
        return self.contract(hidden)  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation_name!r}"
