"""What greedy and beam search share: the result type, the length penalty, the checks.

Both searches drive any model that implements :class:`qkv.models.base.Decodable`
(``start(source) -> state``, ``step(tokens, state) -> StepOutput``), so every qkv model
decodes with the same code.

Counting conventions used throughout:

- a hypothesis's *length* is the number of tokens the model generated for it, EOS
  included when it was generated (a hypothesis cut at ``max_len`` has length ``max_len``);
- its *score* is the sum of the log-probabilities of those generated tokens (EOS included);
- ``tokens`` in the result leave out BOS, EOS and padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from qkv.errors import InputError, NotFiniteError
from qkv.models.base import Decodable, StepOutput

__all__ = [
    "Hypotheses",
    "length_penalty_factor",
    "check_search",
    "check_length_penalty",
    "check_scores",
]

# The special ids every qkv tokenizer reserves (qkv.data.batch defines them; decoding may not
# import data, which sits on the same layer): PAD=0, BOS=1, EOS=2.
DEFAULT_PAD_ID = 0
DEFAULT_BOS_ID = 1
DEFAULT_EOS_ID = 2


@dataclass
class Hypotheses:
    """Decoded sequences, ``num_return`` per source, sentence-major.

    Entry ``i * num_return + j`` is the ``j``-th best hypothesis of source ``i``
    (``num_return`` is 1 unless beam search was asked for an n-best list).

    tokens: generated ids, without BOS, EOS and padding.
    scores: sum of the log-probabilities of the generated tokens (EOS included when
        generated).
    normalized_scores: the score used for ranking, ``scores / length_penalty_factor``;
        equals ``scores`` for greedy search and for beam search with ``length_penalty=0``.
    attention: when asked for, one (T_out, S) tensor per hypothesis, T_out = len(tokens):
        row ``t`` is the attention of the step that produced ``tokens[t]``; else None.
    finished: whether each hypothesis ended with EOS (False: cut at ``max_len``).
    """

    tokens: list[list[int]]
    scores: list[float]
    normalized_scores: list[float]
    finished: list[bool]
    attention: list[Tensor] | None = None
    num_return: int = 1

    def __len__(self) -> int:
        return len(self.tokens)


def length_penalty_factor(length: Tensor, alpha: float) -> Tensor:
    """GNMT's length penalty (Wu et al. 2016): ``((5 + length) / 6) ** alpha``.

    Beam search ranks by ``score / length_penalty_factor(length, alpha)``. ``alpha = 0``
    gives a factor of exactly 1 (rank by the raw sum of log-probabilities); larger
    ``alpha`` favours longer hypotheses, since the (negative) sums are divided by more.

    Shapes: length (...) integer or float tensor -> (...) float tensor (float32 for integer
    lengths, else the lengths' dtype).
    """
    if not length.is_floating_point():
        length = length.float()
    return ((5.0 + length) / 6.0) ** alpha


def check_search(beam: int, length_penalty: float = 0.0) -> None:
    """Refuse a beam width below 1 (1 is greedy search) and a length penalty that is negative
    or not a number (InputError naming ``beam`` / ``length_penalty``), before anything is
    decoded; greedy search reads no length penalty, but a bad one is refused there too."""
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise InputError(f"beam={beam!r} must be a whole number >= 1", fields=("beam",))
    check_length_penalty(length_penalty)


def check_length_penalty(length_penalty: float) -> None:
    """InputError naming ``length_penalty`` unless it is a finite number >= 0."""
    if (
        isinstance(length_penalty, bool)
        or not (isinstance(length_penalty, (int, float)) and math.isfinite(length_penalty))
        or length_penalty < 0
    ):
        raise InputError(
            f"length_penalty={length_penalty!r} must be a number >= 0 (0 = raw log-prob sums)",
            fields=("length_penalty",),
        )


def check_model(model: object) -> None:
    """Fail early, naming the protocol, when ``model`` cannot be decoded."""
    if not isinstance(model, Decodable) or not (callable(model.start) and callable(model.step)):
        raise TypeError(
            f"{type(model).__name__} cannot be decoded: it must implement the Decodable protocol "
            "of qkv.models.base (start(source) -> state and step(tokens, state) -> StepOutput)"
        )


def check_max_len(max_len: int) -> None:
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len={max_len!r} must be an integer >= 1")


def check_step(output: object, rows: int, need_attention: bool, *, step: int) -> StepOutput:
    """Validate one ``model.step`` result for ``rows`` sequences, the ``step``-th token of
    the search (its scores: :func:`check_scores`); return it."""
    if not isinstance(output, StepOutput):
        raise TypeError(
            f"model.step returned a {type(output).__name__}; it must return a StepOutput "
            "(qkv.models.base)"
        )
    log_probs = output.log_probs
    if log_probs.dim() != 2 or log_probs.shape[0] != rows:
        raise ValueError(
            f"model.step returned log_probs of shape {tuple(log_probs.shape)}; "
            f"expected ({rows}, V), one row per sequence being decoded"
        )
    check_scores(log_probs, f"generated token {step}")
    if need_attention:
        attention = output.attention
        if attention is None:
            raise ValueError(
                "need_attention=True but model.step returned attention=None; "
                "decode with need_attention=False for models without source attention"
            )
        if attention.dim() != 2 or attention.shape[0] != rows:
            raise ValueError(
                f"model.step returned attention of shape {tuple(attention.shape)}; "
                f"expected ({rows}, S)"
            )
    return output


def check_scores(scores: Tensor, what: str) -> None:
    """Refuse to pick from ``scores`` (..., V) -- log-probabilities or logits of ``what``
    ("generated token 3", "the classes") -- when a row holds NaN or +inf, or has no finite
    score at all (every entry -inf): a NotFiniteError instead of a choice made from garbage
    (``topk`` and ``argmax`` take NaN for the largest value, ``multinomial`` refuses it).  A
    -inf score alone is a choice the model rules out, and is fine.

    One reduction: a row's maximum is NaN if any entry is, +inf if any is, and -inf only if
    all are."""
    best = scores.amax(dim=-1).flatten()  # one per row
    if bool(torch.isfinite(best).all()):
        return
    row = int((~torch.isfinite(best)).nonzero()[0, 0])  # the first bad row
    values = scores.reshape(-1, scores.shape[-1])[row]
    if bool(values.isnan().any()):
        kind = "NaN"
    elif bool(values.isposinf().any()):
        kind = "inf"
    else:
        kind = "-inf for every choice"
    raise NotFiniteError(
        f"the model's scores for {what} are {kind} (row {row} of {best.numel()}): its "
        "weights or activations are not finite (a diverged run, a corrupt file, float16 "
        "overflow), so nothing is picked from them"
    )
