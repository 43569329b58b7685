"""The position-wise feed-forward network of a Transformer block (SPEC section 6).

``FFN(x) = W_2 act(W_1 x + b_1) + b_2``, applied to every position on its own: the only
place in a block where positions do *not* exchange information.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from qkv.errors import InputError

__all__ = ["FeedForward", "ACTIVATIONS", "SquaredReLU", "make_activation"]


class SquaredReLU(nn.Module):
    """relu(x)^2 (So et al. 2021, "Primer"; nanochat's and modded-nanogpt's MLP)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x).square()


#: Activation names a feed-forward layer accepts (the plain one and the gated one alike).
#: "gelu" is the exact (erf) form used by BERT; "gelu_tanh" is the tanh approximation
#: (GPT-2, Hugging Face's "gelu_new"); "relu2" is the squared ReLU; "silu" gates SwiGLU.
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "relu2": SquaredReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "silu": nn.SiLU,
}


def make_activation(name: str) -> nn.Module:
    """The activation module called ``name`` (one of :data:`ACTIVATIONS`)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation={name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class FeedForward(nn.Module):
    """Expand to ``d_ff``, apply the activation, dropout, contract back to ``d_model``.

    The paper's base model uses d_model 512 and d_ff 2048 with ReLU.  The dropout here acts
    on the hidden activations (as ``nn.TransformerEncoderLayer``; a block passes its
    ``activation_dropout``); the block applies its own dropout to the residual branch.

    Shapes: x (B, T, d_model) -> (B, T, d_model).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if d_model < 1 or d_ff < 1:
            raise ValueError(f"d_model={d_model} and d_ff={d_ff} must be positive")
        if not 0.0 <= dropout < 1.0:
            raise InputError(f"dropout={dropout} must be in [0, 1)")
        self.activation_name = activation
        self.expand = nn.Linear(d_model, d_ff, bias=bias)
        self.activation = make_activation(activation)
        self.dropout = nn.Dropout(dropout)
        self.contract = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        r"""$W_2\,\mathrm{dropout}(f(W_1 x + b_1)) + b_2$.  Shapes: x (B, T, d_model) -> (B, T,
        d_model)."""
        hidden = self.dropout(self.activation(self.expand(x)))  # (B, T, d_ff)
        return self.contract(hidden)  # (B, T, d_model)

    def extra_repr(self) -> str:
        return f"activation={self.activation_name!r}"
