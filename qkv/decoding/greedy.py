"""Greedy search: at every step take the single most probable next token."""

from __future__ import annotations

import torch
from torch import Tensor

from qkv.models.base import Decodable

from .search import (
    DEFAULT_BOS_ID,
    DEFAULT_EOS_ID,
    DEFAULT_PAD_ID,
    Hypotheses,
    check_max_len,
    check_model,
    check_step,
)

__all__ = ["greedy_search"]


@torch.no_grad()
def greedy_search(
    model: Decodable,
    source: Tensor,
    *,
    max_len: int,
    bos_id: int = DEFAULT_BOS_ID,
    eos_id: int = DEFAULT_EOS_ID,
    pad_id: int = DEFAULT_PAD_ID,
    need_attention: bool = False,
) -> Hypotheses:
    """Decode every source of the batch greedily, all at once.

    Each sequence starts from ``bos_id``; a sequence stops when it emits ``eos_id`` (later
    steps feed it ``pad_id`` and leave it unchanged) and every sequence stops after
    ``max_len`` generated tokens, EOS included. The next token is picked with
    :func:`torch.topk`, as in :func:`beam_search`, so ``beam_size=1`` gives the same tokens
    and scores (barring candidates whose scores tie exactly in floating point).

    Shapes: source (B, S) token ids or (B, C, H, W) images -> B hypotheses; with
    ``need_attention`` each carries a (len(tokens), S) attention tensor.
    """
    check_model(model)
    check_max_len(max_len)
    batch_size = source.shape[0]
    device = source.device

    state = model.start(source)
    tokens = torch.full((batch_size,), bos_id, dtype=torch.long, device=device)
    scores = torch.zeros(batch_size, device=device)
    lengths = torch.zeros(batch_size, dtype=torch.long, device=device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=device)
    generated: list[Tensor] = []  # per step (B,)
    attention_rows: list[Tensor] = []  # per step (B, S)

    for step in range(1, max_len + 1):
        output = check_step(
            model.step(tokens, state, need_attention=need_attention),
            batch_size,
            need_attention,
            step=step,
        )
        best_log_prob, best_token = output.log_probs.topk(1, dim=-1)  # (B, 1)
        best_log_prob, best_token = best_log_prob.squeeze(1), best_token.squeeze(1)

        tokens = torch.where(finished, pad_id, best_token)
        scores = torch.where(finished, scores, scores + best_log_prob)
        lengths = torch.where(finished, lengths, step)
        generated.append(tokens)
        if need_attention:
            attention_rows.append(output.attention)
        finished = finished | (tokens == eos_id)
        if bool(finished.all()):
            break
        state = output.state

    history = torch.stack(generated, dim=1).tolist()  # (B, T)
    keep = (lengths - finished.long()).tolist()  # drop the EOS
    attention = None
    if need_attention:
        stacked = torch.stack(attention_rows, dim=1)  # (B, T, S)
        attention = [stacked[row, :n] for row, n in enumerate(keep)]
    return Hypotheses(
        tokens=[row[:n] for row, n in zip(history, keep, strict=True)],
        scores=scores.tolist(),
        normalized_scores=scores.tolist(),
        finished=finished.tolist(),
        attention=attention,
    )
