"""Beam search: keep the ``beam_size`` best partial hypotheses of every source.

How it works (all sources at once, no Python loop over the batch inside a step):

- Every source owns ``K = beam_size`` slots; the model decodes ``B * K`` rows. Only slot 0
  starts alive, so the first step does not pick K copies of the same token.
- A slot is either *alive* or *finished* (it emitted EOS). A finished slot stays in the
  beam with its frozen score and offers exactly one candidate: itself, unchanged.
- Each step, every alive slot offers its V continuations; the K best of the K * V
  candidates, ranked by ``score / length_penalty_factor(length, alpha)``, form the next beam.
  Finished hypotheses therefore compete with the alive ones and are pushed out only by
  better candidates.
- A source is done when all K of its slots are finished: every alive continuation ranked
  below them (with ``length_penalty=0`` no continuation can ever catch up, since adding
  log-probabilities only lowers a score).  With ``length_penalty=0`` it is also done as soon
  as its ``num_return`` best-ranked slots are finished, which is then exact (nothing alive
  can still overtake them).  With a length penalty a longer hypothesis can overtake, so the
  same rule is a heuristic, used only when asked for (``stop_early=True``, as OpenNMT
  stops when its best hypothesis has ended): a weak model otherwise keeps extending
  hypotheses to ``max_len`` long after greedy search has stopped, which (not the cost of a
  step) is where beam search's extra time goes.  A done source's slots are frozen, so its
  result never depends on the rest of the batch.  Search stops when
  every source is done, or after ``max_len`` generated tokens (EOS included); unfinished
  hypotheses then compete as they are.

With ``beam_size=1`` this is exactly greedy search (same tokens, same scores).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from qkv.models.base import Decodable, select_state

from .greedy import greedy_search
from .search import (
    DEFAULT_BOS_ID,
    DEFAULT_EOS_ID,
    DEFAULT_PAD_ID,
    Hypotheses,
    check_length_penalty,
    check_max_len,
    check_model,
    check_step,
    length_penalty_factor,
)

__all__ = ["beam_search", "decode"]


@torch.no_grad()
def beam_search(
    model: Decodable,
    source: Tensor,
    *,
    beam_size: int = 4,
    max_len: int,
    length_penalty: float = 1.0,
    num_return: int = 1,
    bos_id: int = DEFAULT_BOS_ID,
    eos_id: int = DEFAULT_EOS_ID,
    pad_id: int = DEFAULT_PAD_ID,
    need_attention: bool = False,
    stop_early: bool = False,
) -> Hypotheses:
    """Decode every source of the batch with beam search, all at once.

    ``length_penalty`` is GNMT's alpha: hypotheses are ranked by
    ``sum of log-probs / ((5 + length) / 6) ** alpha`` (see :func:`length_penalty_factor`);
    0 ranks by the raw sum. ``num_return`` (<= beam_size) hypotheses per source come back,
    best first, sentence-major (see :class:`Hypotheses`).  ``stop_early``: with a length
    penalty too, a source stops once its ``num_return`` best hypotheses have ended (a
    heuristic; see the module docstring).

    Shapes: source (B, S) token ids or (B, C, H, W) images -> B * num_return hypotheses;
    with ``need_attention`` each carries a (len(tokens), S) attention tensor, its rows
    followed back through the beam's reorderings.
    """
    check_model(model)
    check_max_len(max_len)
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1")
    if not isinstance(num_return, int) or not 1 <= num_return <= beam_size:
        raise ValueError(f"num_return={num_return!r} must be between 1 and beam_size={beam_size}")
    check_length_penalty(length_penalty)

    batch_size, k = source.shape[0], beam_size
    device = source.device
    # Row b * K + j of the model's batch is slot j of source b.
    row_offset = torch.arange(batch_size, device=device).unsqueeze(1) * k  # (B, 1)
    state = select_state(
        model.start(source), torch.arange(batch_size, device=device).repeat_interleave(k)
    )
    tokens = torch.full((batch_size * k,), bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch_size, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # only slot 0 is alive at the start
    lengths = torch.zeros(batch_size, k, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, k, dtype=torch.bool, device=device)
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)  # (B,) source settled
    # Back-pointers, one entry per step, each (B, K): the token a slot took and the slot it
    # came from; with need_attention the (B, K, S) attention of the step that produced it.
    history_tokens: list[Tensor] = []
    history_origins: list[Tensor] = []
    history_attention: list[Tensor] = []

    for step in range(1, max_len + 1):
        output = check_step(
            model.step(tokens, state, need_attention=need_attention),
            batch_size * k,
            need_attention,
            step=step,
        )
        vocab_size = output.log_probs.shape[-1]
        if not (0 <= pad_id < vocab_size and 0 <= eos_id < vocab_size):
            raise ValueError(
                f"pad_id={pad_id} and eos_id={eos_id} must be token ids below the model's "
                f"vocabulary size {vocab_size}"
            )
        log_probs = output.log_probs.reshape(batch_size, k, vocab_size)

        candidates = scores.unsqueeze(-1) + log_probs  # (B, K, V)
        # A finished slot (or any slot of a done source) offers one candidate, itself with
        # its frozen score, under pad_id.
        stopped = finished | done.unsqueeze(1)  # (B, K)
        frozen = torch.full_like(candidates, float("-inf"))
        frozen[..., pad_id] = scores
        candidates = torch.where(stopped.unsqueeze(-1), frozen, candidates)
        candidate_lengths = torch.where(stopped, lengths, step)  # (B, K)
        penalty = length_penalty_factor(candidate_lengths.to(candidates.dtype), length_penalty)
        ranking = candidates / penalty.unsqueeze(-1)

        _, best = ranking.view(batch_size, k * vocab_size).topk(k, dim=-1)  # (B, K)
        origin = torch.div(best, vocab_size, rounding_mode="floor")  # (B, K) slot it extends
        chosen = best % vocab_size  # (B, K)
        was_stopped = stopped.gather(1, origin)
        scores = candidates.view(batch_size, k * vocab_size).gather(1, best)
        lengths = torch.where(was_stopped, lengths.gather(1, origin), step)
        finished = finished.gather(1, origin) | (~was_stopped & (chosen == eos_id))

        history_tokens.append(chosen)
        history_origins.append(origin)
        if need_attention:
            attention = output.attention.reshape(batch_size, k, -1)
            history_attention.append(attention.gather(1, _expand_like(origin, attention)))
        # Dead slots (score -inf, possible when K exceeds the live candidates) count as done.
        done = done | (finished | scores.isneginf()).all(dim=-1)
        if stop_early or length_penalty == 0:
            current = scores / length_penalty_factor(lengths.to(scores.dtype), length_penalty)
            leaders = current.topk(num_return, dim=-1).indices  # (B, n) best-ranked slots
            done = done | finished.gather(1, leaders).all(dim=-1)
        if bool(done.all()):
            break
        rows = (origin + row_offset).view(-1)
        state = select_state(output.state, rows)
        tokens = chosen.view(-1)

    ranking = scores / length_penalty_factor(lengths.to(scores.dtype), length_penalty)
    order = ranking.argsort(dim=-1, descending=True, stable=True)[:, :num_return]  # (B, n)
    return _backtrack(
        order,
        scores=scores,
        ranking=ranking,
        lengths=lengths,
        finished=finished,
        history_tokens=history_tokens,
        history_origins=history_origins,
        history_attention=history_attention if need_attention else None,
    )


def _expand_like(index: Tensor, source: Tensor) -> Tensor:
    """(B, K) slot index -> (B, K, S) index for gathering rows of a (B, K, S) tensor."""
    return index.unsqueeze(-1).expand(-1, -1, source.shape[-1])


def _backtrack(
    order: Tensor,
    *,
    scores: Tensor,
    ranking: Tensor,
    lengths: Tensor,
    finished: Tensor,
    history_tokens: list[Tensor],
    history_origins: list[Tensor],
    history_attention: list[Tensor] | None,
) -> Hypotheses:
    """Follow the back-pointers from the final slots ``order`` (B, n) to the first step."""
    slots = order
    tokens_backwards: list[Tensor] = []
    attention_backwards: list[Tensor] = []
    for step in reversed(range(len(history_tokens))):
        tokens_backwards.append(history_tokens[step].gather(1, slots))
        if history_attention is not None:
            attention = history_attention[step]
            attention_backwards.append(attention.gather(1, _expand_like(slots, attention)))
        slots = history_origins[step].gather(1, slots)

    num_return = order.shape[1]
    paths = torch.stack(tokens_backwards[::-1], dim=-1).flatten(0, 1).tolist()  # (B * n, T)
    is_finished = finished.gather(1, order).flatten()
    keep = (lengths.gather(1, order).flatten() - is_finished.long()).tolist()  # drop the EOS
    attention = None
    if history_attention is not None:
        rows = torch.stack(attention_backwards[::-1], dim=2).flatten(0, 1)  # (B * n, T, S)
        attention = [rows[index, :n] for index, n in enumerate(keep)]
    return Hypotheses(
        tokens=[path[:n] for path, n in zip(paths, keep, strict=True)],
        scores=scores.gather(1, order).flatten().tolist(),
        normalized_scores=ranking.gather(1, order).flatten().tolist(),
        finished=is_finished.tolist(),
        attention=attention,
        num_return=num_return,
    )


def decode(
    model: Decodable, source: Tensor, *, beam: int, length_penalty: float = 1.0, **options: Any
) -> Hypotheses:
    """Greedy search for ``beam=1``, else beam search of width ``beam`` (``length_penalty``
    applies to it only); ``options`` are the keywords both take (``max_len``, the special
    token ids, ``need_attention``).  How the translator and the captioner decode."""
    if beam == 1:
        return greedy_search(model, source, **options)
    return beam_search(model, source, beam_size=beam, length_penalty=length_penalty, **options)
