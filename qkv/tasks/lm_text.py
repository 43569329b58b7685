"""Using a trained language model on text: its loss at a context length, and sampling
continuations of a prompt (both re-exported by :mod:`qkv.tasks.lm`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..data.batch import NO_PAD_ID
from ..data.text import TextDataset
from ..data.text_tokenizers import encode_prompt
from ..decoding import sample
from ..errors import InputError, NotFiniteError
from ..models import DecoderLM

if TYPE_CHECKING:
    from .lm import LoadedLM

__all__ = ["context_loss", "generate_text"]


@torch.no_grad()
def context_loss(
    model: DecoderLM, ids: torch.Tensor, *, context: int, batch_size: int = 8
) -> float:
    """Mean next-token loss (nats) over windows of ``context + 1`` tokens of ``ids`` (N,),
    every prediction made with the window's whole prefix in view: how well the model reads a
    context of that length (past its training ``max_len``, positions must extrapolate)."""
    windows = TextDataset(ids, context=context, pad_id=NO_PAD_ID)  # whole windows: no padding
    full = [i for i, n in enumerate(windows.target_lengths) if n == context + 1]
    if not full:
        raise InputError(f"the text has fewer than {context + 1} tokens: no window to score")
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(full), batch_size):
        batch = torch.stack([windows[i] for i in full[start : start + batch_size]]).to(device)
        logits = model(batch[:, :-1]).logits
        total += F.cross_entropy(
            logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum"
        ).item()
        count += batch[:, 1:].numel()
    if not math.isfinite(total):  # a loss of NaN is no score: refuse it, do not print it
        raise NotFiniteError(
            f"the model's loss on the text is {total}: its weights or activations are not "
            "finite (a diverged run, a corrupt file, float16 overflow)"
        )
    return total / count if count else math.nan


def generate_text(
    lm: LoadedLM,
    prompt: str,
    *,
    max_new_tokens: int,
    num_samples: int = 1,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    stream: Callable[[str], None] | None = None,
) -> list[str]:
    """``num_samples`` continuations of ``prompt`` (the prompt itself left out).

    Sampling stops at the model's end token (``lm.eos_ids``: a pretrained folder's); the
    text ends before it.  ``stream(text)`` receives the prompt once the first
    token is drawn, then the first
    sample's new text as tokens are drawn (a byte-level token that ends inside a UTF-8
    character is held back until the character is complete).
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise InputError(
            f"num_samples={num_samples!r} must be a positive integer", fields=("num_samples",)
        )
    prompt_ids = encode_prompt(lm.tokenizer, prompt)
    document_start = getattr(lm.model.config, "document_start", None)
    # trained packed: <s> (or a folder's BOS) opens the document, once: a folder's tokenizer
    # may add its BOS itself
    if document_start is not None and prompt_ids[0] != document_start:
        prompt_ids = [document_start, *prompt_ids]
    limit = getattr(lm.model, "max_positions", None)
    if limit is not None and len(prompt_ids) > limit:
        raise InputError(lm.too_long(len(prompt_ids)))
    device = next(lm.model.parameters()).device
    batch = torch.tensor([prompt_ids] * num_samples, dtype=torch.long, device=device)
    new_ids: list[int] = []
    shown = 0

    def on_token(tokens: torch.Tensor) -> None:
        nonlocal shown
        if not new_ids:
            stream(prompt)
        new_ids.append(int(tokens[0]))
        text = lm.tokenizer.decode(_until_end(new_ids, lm.eos_ids))
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its end
            return
        stream(text[shown:])
        shown = len(text)

    ids = sample(
        lm.model,
        batch,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        use_cache=use_cache,
        on_token=on_token if stream is not None else None,
        eos_ids=lm.eos_ids,
    )
    return [
        lm.tokenizer.decode(_until_end(row[len(prompt_ids) :].tolist(), lm.eos_ids)) for row in ids
    ]


def _until_end(ids: list[int], eos_ids: Sequence[int]) -> list[int]:
    """The ids before the first end token."""
    ends = [index for index, token in enumerate(ids) if token in eos_ids]
    return ids[: ends[0]] if ends else ids
