"""Sampling from a language model: temperature, top-k and nucleus (top-p), with a KV cache.

The model is driven through the same step protocol as greedy and beam search:
``state = model.start(prompt[:, :-1])`` reads all but the prompt's last token into the KV
caches in one pass, then ``model.step(token, state)`` consumes one token and scores the next.
Without the cache (``use_cache=False``, for comparison) every step runs the whole sequence
again through ``model(ids).logits``.

A token is drawn from ``softmax(logits / temperature)`` restricted to the ``top_k`` most
probable tokens and to the smallest set whose probability reaches ``top_p``
(Holtzman et al. 2020); ``temperature=0`` takes the most probable token (greedy).
Draws use ``generator`` (or ``seed``), so a seeded run is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv.errors import InputError

from .search import check_model, check_step

__all__ = ["sample", "filter_logits"]


@torch.no_grad()
def sample(
    model,
    prompt_ids: Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    on_token: Callable[[Tensor], None] | None = None,
    eos_ids: Sequence[int] = (),
) -> Tensor:
    """Continue every prompt of the batch by ``max_new_tokens`` sampled tokens, or fewer
    where the model has end tokens (``eos_ids``, e.g. a pretrained folder's
    ``eos_token_id``): sampling stops once every sequence has drawn one, and a sequence that
    has ended is continued with its end token until the others end.

    ``on_token(tokens)`` is called with each step's new tokens (B,) as they are drawn
    (streaming).  A model with learned positions (``model.max_positions`` not None) reads at
    most its last ``max_positions`` tokens: past that the window slides, and the cache is
    rebuilt from the window at each step (as without the cache).  The model needs
    ``start``/``step`` (the step protocol), and ``forward`` returning ``.logits`` when
    ``use_cache=False``.

    Shapes: prompt_ids (B, T) -> (B, T + N), the prompts included, N <= max_new_tokens.
    """
    check_model(model)
    _check_options(prompt_ids, max_new_tokens, temperature, top_k, top_p)
    if seed is not None and generator is not None:
        raise InputError("pass seed or generator, not both")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise InputError(f"seed={seed!r} must be a whole number >= 0", fields=("seed",))
    limit = getattr(model, "max_positions", None)
    if limit is not None and prompt_ids.shape[1] > limit:
        raise InputError(
            f"the prompt has {prompt_ids.shape[1]} tokens, but this model has only {limit} "
            f"positions; shorten the prompt to at most {limit} tokens (a model trained by "
            "qkv with positions 'sinusoidal', 'rope' or 'alibi' has no such limit)"
        )
    if seed is not None:
        generator = torch.Generator(device=prompt_ids.device).manual_seed(seed)
    batch = prompt_ids.shape[0]
    ids = prompt_ids
    state, consumed = None, 0  # consumed: positions in the cache
    ends = torch.tensor(list(eos_ids), dtype=torch.long, device=prompt_ids.device)
    ended = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
    for _ in range(max_new_tokens):
        window = ids if limit is None else ids[:, -limit:]  # past max_len: the last limit
        if not use_cache:
            logits = model(window).logits[:, -1].float()  # (B, V)
        else:
            if state is None or consumed + 1 > window.shape[1]:
                # first step, or the window slid: read it afresh (all but its last token)
                state, consumed = model.start(window[:, :-1]), window.shape[1] - 1
            output = check_step(model.step(ids[:, -1], state, need_attention=False), batch, False)
            logits, state, consumed = output.log_probs, output.state, consumed + 1
        token = _draw(logits, temperature, top_k, top_p, generator)  # (B,)
        if len(ends):
            token = torch.where(ended, ends[0], token)  # an ended sequence stays ended
            ended |= torch.isin(token, ends)
        ids = torch.cat([ids, token[:, None]], dim=1)
        if on_token is not None:
            on_token(token)
        if len(ends) and bool(ended.all()):
            break
    return ids


def filter_logits(
    logits: Tensor, *, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """Set to -inf every logit outside the ``top_k`` largest and outside the nucleus: the
    smallest set of most probable tokens whose probability reaches ``top_p`` (the most
    probable token always stays).  Shapes: (B, V) -> (B, V)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above
        drop_sorted = before >= top_p  # the first token has before = 0 and always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _draw(
    logits: Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = filter_logits(logits / temperature, top_k=top_k, top_p=top_p)
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _check_options(prompt_ids, max_new_tokens, temperature, top_k, top_p) -> None:
    if not isinstance(prompt_ids, Tensor) or prompt_ids.dim() != 2:
        raise InputError("prompt_ids must be token ids of shape (B, T)")
    if prompt_ids.shape[1] == 0:
        raise InputError("the prompt is empty: sampling needs at least one token to start from")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise InputError(
            f"max_new_tokens={max_new_tokens!r} must be an integer >= 0",
            fields=("max_new_tokens",),
        )
    if not temperature >= 0:
        raise InputError(
            f"temperature={temperature} must be >= 0 (0 = greedy)", fields=("temperature",)
        )
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise InputError(f"top_k={top_k!r} must be a positive integer", fields=("top_k",))
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p={top_p} must lie in (0, 1]", fields=("top_p",))
