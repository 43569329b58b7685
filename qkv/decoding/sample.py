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

from .search import check_model, check_scores, check_step

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
    ``use_cache=False``.  Scores that are NaN or inf raise
    :class:`~qkv.errors.NotFiniteError` (no token is drawn from them); prompt or end ids
    outside the model's vocabulary (``model.config.vocab_size``) raise InputError.

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
    vocab_size = _vocabulary_size(model)
    if vocab_size is not None:  # before any id reaches an embedding (step's is unchecked)
        _check_in_vocabulary(prompt_ids, eos_ids, vocab_size)
    batch = prompt_ids.shape[0]
    ids = prompt_ids
    state, consumed = None, 0  # consumed: positions in the cache
    ends = torch.tensor(list(eos_ids), dtype=torch.long, device=prompt_ids.device)
    ended = torch.zeros(batch, dtype=torch.bool, device=prompt_ids.device)
    for count in range(1, max_new_tokens + 1):
        window = ids if limit is None else ids[:, -limit:]  # past max_len: the last limit
        if not use_cache:
            logits = model(window).logits[:, -1].float()  # (B, V)
            check_scores(logits, f"generated token {count}")
        else:
            if state is None or consumed + 1 > window.shape[1]:
                # first step, or the window slid: read it afresh (all but its last token)
                state, consumed = model.start(window[:, :-1]), window.shape[1] - 1
            output = check_step(
                model.step(ids[:, -1], state, need_attention=False), batch, False, step=count
            )
            logits, state, consumed = output.log_probs, output.state, consumed + 1
        if vocab_size is None and count == 1:  # a model that does not say: its scores do
            _check_in_vocabulary(prompt_ids[:, :0], eos_ids, logits.shape[-1])
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
    # shifted so the best is 0 first: a small temperature then sends the others to -inf
    # instead of the best to +inf (softmax of +inf is NaN)
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    logits = filter_logits(shifted / temperature, top_k=top_k, top_p=top_p)
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _vocabulary_size(model) -> int | None:
    """The model's vocabulary size where it says (``config.vocab_size`` or ``vocab_size``)."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    size = getattr(model, "vocab_size", None) if size is None else size
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _check_in_vocabulary(prompt_ids: Tensor, eos_ids: Sequence[int], vocab_size: int) -> None:
    """The prompt's ids and the end ids (an ended sequence is fed its end id) must be ids of
    the model's vocabulary: an InputError, not an IndexError inside an embedding."""
    if prompt_ids.numel():
        low, high = (int(bound) for bound in torch.aminmax(prompt_ids))  # one pass
        if low < 0 or high >= vocab_size:
            raise InputError(
                f"prompt_ids holds ids outside the model's vocabulary 0..{vocab_size - 1} "
                f"(min {low}, max {high}); were they made by another model's tokenizer?"
            )
    outside = [i for i in eos_ids if not 0 <= i < vocab_size]
    if outside:
        raise InputError(
            f"eos_ids {outside} are outside the model's vocabulary 0..{vocab_size - 1}",
            fields=("eos_ids",),
        )


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
