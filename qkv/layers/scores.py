"""Alignment (score) functions e_ij = a(q_i, k_j) as small modules (SPEC section 1).

Each score can ``prepare`` the keys once (e.g. Bahdanau's W_k k) so a decoder that
attends over the same inputs at every step pays for that projection only once.
A new score is a small class and one :func:`register_score` call.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable

from torch import Tensor, nn

__all__ = [
    "Score",
    "DotScore",
    "ScaledDotScore",
    "BilinearScore",
    "AdditiveScore",
    "register_score",
    "make_score",
    "available_scores",
]


class Score(nn.Module, abc.ABC):
    """Base class.  Shapes: query (B, Tq, Dq), key (B, Tk, Dk) -> scores (B, Tq, Tk)."""

    def prepare(self, key: Tensor) -> Tensor:
        """Work on the keys that does not depend on the query (default: none)."""
        return key

    @abc.abstractmethod
    def score(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        """Scores of every query against the prepared keys: (B, Tq, Tk)."""

    def forward(self, query: Tensor, key: Tensor) -> Tensor:
        """``score(query, prepare(key))``: (B, Tq, Dq), (B, Tk, Dk) -> scores (B, Tq, Tk)."""
        return self.score(query, self.prepare(key))


def _check_same_width(query: Tensor, key: Tensor, name: str) -> None:
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"{name} needs queries and keys of the same width, got {query.shape[-1]} and "
            f"{key.shape[-1]}; use 'general' (bilinear) or 'additive', or project the keys"
        )


class DotScore(Score):
    """Luong's 'dot': q . k.  Shapes: (B, Tq, D), (B, Tk, D) -> (B, Tq, Tk)."""

    def score(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        r"""$e_{ij} = q_i \cdot k_j$.  Shapes: query (B, Tq, D), key (B, Tk, D) -> (B, Tq, Tk)."""
        _check_same_width(query, prepared_key, "the dot score")
        return query @ prepared_key.transpose(-2, -1)


class ScaledDotScore(Score):
    """The Transformer's q . k / sqrt(d_k).  Shapes as :class:`DotScore`."""

    def score(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        r"""$e_{ij} = q_i \cdot k_j / \sqrt{D}$.  Shapes: query (B, Tq, D), key (B, Tk, D) -> (B, Tq,
        Tk)."""
        _check_same_width(query, prepared_key, "the scaled dot score")
        return query @ prepared_key.transpose(-2, -1) / math.sqrt(query.shape[-1])


class BilinearScore(Score):
    """Luong's 'general' score: q^T W k.  Shapes: (B, Tq, Dq), (B, Tk, Dk) -> (B, Tq, Tk)."""

    def __init__(self, *, query_dim: int, key_dim: int):
        super().__init__()
        self.weight = nn.Linear(key_dim, query_dim, bias=False)

    def prepare(self, key: Tensor) -> Tensor:
        """$W k$, computed once per key sequence.  Shapes: key (B, Tk, Dk) -> (B, Tk, Dq)."""
        return self.weight(key)  # W k: (B, Tk, Dq)

    def score(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        r"""$e_{ij} = q_i^\top W k_j$.  Shapes: query (B, Tq, Dq), prepared key (B, Tk, Dq) -> (B,
        Tq, Tk)."""
        return query @ prepared_key.transpose(-2, -1)


class AdditiveScore(Score):
    """Bahdanau's additive (concat) score: v^T tanh(W_q q + W_k k), a one-hidden-layer
    network as the alignment function.  Shapes: (B, Tq, Dq), (B, Tk, Dk) -> (B, Tq, Tk)."""

    def __init__(self, *, query_dim: int, key_dim: int, hidden_dim: int | None = None):
        super().__init__()
        hidden_dim = hidden_dim or key_dim
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=True)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def prepare(self, key: Tensor) -> Tensor:
        """$W_k k$, computed once per key sequence.  Shapes: key (B, Tk, Dk) -> (B, Tk, A)."""
        return self.key_proj(key)  # W_k k: (B, Tk, A)

    def score(self, query: Tensor, prepared_key: Tensor) -> Tensor:
        r"""$e_{ij} = v^\top \tanh(W_q q_i + W_k k_j)$.  Shapes: query (B, Tq, Dq), prepared key (B,
        Tk, A) -> (B, Tq, Tk)."""
        hidden = (
            self.query_proj(query)[:, :, None, :] + prepared_key[:, None, :, :]
        )  # (B, Tq, Tk, A)
        return self.v(hidden.tanh()).squeeze(-1)  # (B, Tq, Tk)


ScoreFactory = Callable[..., Score]
_SCORES: dict[str, ScoreFactory] = {}


def register_score(name: str, factory: ScoreFactory) -> None:
    """Add a score: ``factory(query_dim=..., key_dim=..., hidden_dim=...) -> Score``."""
    _SCORES[name] = factory


def available_scores() -> list[str]:
    """The names of the registered score functions, sorted (``register_score`` adds one)."""
    return sorted(_SCORES)


def make_score(name: str, *, query_dim: int, key_dim: int, hidden_dim: int | None = None) -> Score:
    """Build a registered score by name ("dot", "scaled_dot", "general", "additive", ...)."""
    if name not in _SCORES:
        raise ValueError(
            f"unknown score {name!r}; choose from {available_scores()} or register_score()"
        )
    if name in ("dot", "scaled_dot") and query_dim != key_dim:
        raise ValueError(
            f"score {name!r} needs query_dim == key_dim, got {query_dim} and {key_dim}; "
            "use 'general' or 'additive', or set key_dim to the query width"
        )
    return _SCORES[name](query_dim=query_dim, key_dim=key_dim, hidden_dim=hidden_dim)


register_score("dot", lambda **_: DotScore())
register_score("scaled_dot", lambda **_: ScaledDotScore())
register_score(
    "general",
    lambda *, query_dim, key_dim, **_: BilinearScore(query_dim=query_dim, key_dim=key_dim),
)
register_score(
    "bilinear",
    lambda *, query_dim, key_dim, **_: BilinearScore(query_dim=query_dim, key_dim=key_dim),
)
register_score("additive", lambda **dims: AdditiveScore(**dims))
