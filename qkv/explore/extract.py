"""Getting attention out of a model: decode with the library's searches, then one
teacher-forced pass with ``need_weights`` over the decoded tokens.

The same pass serves the explorer page and ``qkv attention``'s PNG heatmaps, so both show
the numbers the model computes with ``need_weights`` (not the averaged step attention that
decoding keeps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from qkv.data import BOS_ID, EOS_ID, PAD_ID
from qkv.decoding import beam_search, check_scores, greedy_search
from qkv.errors import InputError

__all__ = [
    "classifier_attention",
    "Decoded",
    "teacher_forced_attention",
    "decode_hypotheses",
]


@dataclass
class Decoded:
    """One hypothesis of a search: generated ids (without <s> and </s>), its score (sum of
    log-probabilities), the score the search ranked by, whether it ended with </s>."""

    search: str
    ids: list[int]
    score: float
    normalized_score: float
    finished: bool


@torch.no_grad()
def teacher_forced_attention(
    model: nn.Module, source: Tensor, target_input: Tensor
) -> dict[str, list[Tensor]]:
    """Every attention the model reports with ``need_weights``, for one sequence.

    Returns {name: per layer (H, Tq, Tk)} float32 on the CPU, e.g. "encoder", "decoder" and
    "cross" for a Transformer, "cross" alone for an RNN or a captioner (H = 1 for models
    with one attention head); {} for a model without attention.  Row t of a "cross" or
    "decoder" matrix is the step that reads ``target_input[t]`` and predicts the next token.

    Shapes: source (1, S) token ids or (1, 3, H, W) image, target_input (1, T) ids.
    """
    if source.shape[0] != 1 or target_input.dim() != 2 or target_input.shape[0] != 1:
        raise InputError(
            f"teacher_forced_attention takes one sequence: source (1, ...) and target_input "
            f"(1, T), got {tuple(source.shape)} and {tuple(target_input.shape)}"
        )
    output = model(source, target_input, need_weights=True)
    layers_by_name: dict[str, list[Tensor]] = {}
    for name, layers in (output.attention or {}).items():
        if layers is None:
            continue
        per_layer = []
        for weights in layers:
            weights = weights[0]  # (H, Tq, Tk), or (Tq, Tk) for single-head attention
            per_layer.append((weights if weights.dim() == 3 else weights[None]).float().cpu())
        layers_by_name[name] = per_layer
    return layers_by_name


@torch.no_grad()
def decode_hypotheses(
    model: nn.Module,
    source: Tensor,
    *,
    max_len: int,
    beam: int = 1,
    length_penalty: float = 1.0,
) -> list[Decoded]:
    """Greedy search, then (beam > 1) every hypothesis of a beam search, best first.

    Shapes: source (1, S) token ids or (1, 3, H, W) image."""
    if not isinstance(beam, int) or beam < 1:
        raise InputError(f"beam={beam!r} must be an integer >= 1 (1 = greedy only)")
    options = dict(max_len=max_len, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
    greedy = greedy_search(model, source, **options)
    found = [_hypothesis("greedy", greedy, 0)]
    if beam > 1:
        beams = beam_search(
            model,
            source,
            beam_size=beam,
            num_return=beam,
            length_penalty=length_penalty,
            **options,
        )
        # a beam wider than the live candidates keeps dead slots (score -inf): not hypotheses
        ranks = [rank for rank in range(len(beams)) if math.isfinite(beams.scores[rank])]
        found += [_hypothesis(f"beam {rank + 1}", beams, rank) for rank in ranks]
    return found


def _hypothesis(search: str, found, row: int) -> Decoded:
    return Decoded(
        search=search,
        ids=list(found.tokens[row]),
        score=float(found.scores[row]),
        normalized_score=float(found.normalized_scores[row]),
        finished=bool(found.finished[row]),
    )


@torch.no_grad()
def classifier_attention(model: nn.Module, source: Tensor) -> tuple[Tensor, dict[str, list]]:
    """``model.classify(source, need_attention=True)``: the logits and every attention, each
    per layer as (B, H, Tq, Tk) float32 on the CPU (H = 1 for single-head attention).

    Names: "feature" (regions x regions, one per picture: B pictures, or every real frame of
    a clip batch), "regions" (1 x regions), "frames" (1 x frames), "self" (frames x frames).
    Shapes: source (B, C, S, S) pictures or (B, T, C, S, S) clips -> logits (B, 1|T, K + 1).
    """
    output = model.classify(source, need_attention=True)
    check_scores(output.logits[..., 1:], "the classes")  # never a class picked from NaN
    attention = {
        name: [(w[:, None] if w.dim() == 3 else w).float().cpu() for w in layers]
        for name, layers in (output.attention or {}).items()
    }
    return output.logits, attention
