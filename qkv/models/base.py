"""What every qkv model shares with the task code around it.

Training calls ``model(source, target_input)`` and gets a :class:`Seq2SeqOutput`.
Decoding (greedy and beam search, one implementation for every model) needs only the
:class:`Decodable` protocol: ``start(source) -> state`` once, then ``step(tokens, state)``
per generated token.  A state is any tree of tensors (dicts, lists, tuples, dataclasses,
or objects with a ``select(indices)`` method such as a KV cache) whose tensors are
batch-first; :func:`select_state` reorders it along the batch for beam search.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

__all__ = ["Seq2SeqOutput", "StepOutput", "LMOutput", "Decodable", "select_state"]


@dataclass
class Seq2SeqOutput:
    """A teacher-forced forward pass.

    logits: (B, T, V) next-token scores for every target position.
    attention: named attention weights when asked for (e.g. ``{"cross": [per layer
        (B, H, T, S)]}`` for a Transformer, ``{"cross": [(B, T, S)]}`` for an RNN), else None.
    aux_loss: a model-specific term the trainer adds to the token loss (e.g. the
        captioner's doubly stochastic attention regulariser), else None.
    """

    logits: Tensor
    attention: dict[str, list[Tensor]] | None = None
    aux_loss: Tensor | None = None


@dataclass
class StepOutput:
    """One decoding step.

    log_probs: (B, V) log-probabilities of the next token.
    state: the decoder state after consuming ``tokens``.
    attention: (B, S) the step's attention over the source (positions or image regions),
        for alignment plots; None if the model has none, or may be None when the step was
        called with ``need_attention=False``.
    """

    log_probs: Tensor
    state: Any
    attention: Tensor | None = None


@runtime_checkable
class Decodable(Protocol):
    """The step protocol that greedy and beam search drive."""

    def start(self, source: Tensor) -> Any:
        """Encode a batch of sources (B, S) token ids or (B, C, H, W) images; return the state."""

    def step(self, tokens: Tensor, state: Any, *, need_attention: bool = True) -> StepOutput:
        """Consume the last generated token of each sequence, tokens (B,), and score the next.

        ``need_attention=False`` tells the model the search will not keep the step's
        attention, so it may skip computing it (a Transformer does; an RNN, whose attention
        is part of the step, returns it anyway)."""


def select_state(state: Any, indices: Tensor) -> Any:
    """Pick rows ``indices`` (along the batch, dim 0) of every tensor in a state tree."""
    if state is None or isinstance(state, (int, float, str, bool)):
        return state
    if isinstance(state, Tensor):
        return state.index_select(0, indices)
    if hasattr(state, "select") and callable(state.select):
        return state.select(indices)
    if isinstance(state, dict):
        return {name: select_state(value, indices) for name, value in state.items()}
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # NamedTuple
        return type(state)(*(select_state(value, indices) for value in state))
    if isinstance(state, (list, tuple)):
        return type(state)(select_state(value, indices) for value in state)
    if dataclasses.is_dataclass(state):
        changes = {
            f.name: select_state(getattr(state, f.name), indices) for f in dataclasses.fields(state)
        }
        return dataclasses.replace(state, **changes)
    raise TypeError(
        f"select_state cannot reorder a {type(state).__name__}; give it a select(indices) method"
    )


@dataclass
class LMOutput:
    """logits: (B, T, V) next-token scores.  attention: {"self": per block (B, H, T, Tk)} when
    asked for, else None.  aux_loss: always None (the trainer's field)."""

    logits: Tensor
    attention: dict[str, list[Tensor]] | None = None
    aux_loss: Tensor | None = None
