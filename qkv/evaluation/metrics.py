"""Corpus scores with sacreBLEU: BLEU, chrF, exact match, cumulative BLEU-1..4, BLEU by length.

Texts are detokenised strings. BLEU tokenises them itself with sacreBLEU's ``'13a'``
tokenizer (the WMT standard, which splits punctuation off words) unless told otherwise;
pass ``tokenize='none'`` for text that is already tokenised (e.g. captions split on spaces).
chrF works on characters and needs no tokenizer. Scores are on sacreBLEU's 0-100 scale.

References come either as one string per hypothesis, or as a list of strings per
hypothesis (several references, as in captioning; the lists may differ in length), and
BLEU/chrF then count matches against all of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF

__all__ = ["Scores", "LengthBucket", "corpus_scores", "bleu_n", "bleu_1_to_4", "bleu_by_length"]

References = Sequence[str] | Sequence[Sequence[str]]

DEFAULT_LENGTH_BUCKETS: tuple[tuple[int, int | None], ...] = (
    (0, 10),
    (11, 20),
    (21, 30),
    (31, 40),
    (41, None),
)


@dataclass(frozen=True)
class Scores:
    """Corpus-level scores.

    bleu, chrf: sacreBLEU's corpus BLEU and chrF, 0-100.
    exact_match: share (0-1) of hypotheses equal to their first reference, both stripped.
    signature: sacreBLEU's signatures, ``{"bleu": ..., "chrf": ...}``, to report with the scores.
    num_sentences: how many hypotheses were scored.
    """

    bleu: float
    chrf: float
    exact_match: float
    signature: dict[str, str]
    num_sentences: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LengthBucket:
    """BLEU of the sentences whose source length lies in ``[low, high]`` (inclusive).

    label: e.g. ``"11-20"``, or ``"41+"`` for an open-ended bucket.
    bleu: NaN when the bucket holds no sentence.
    """

    label: str
    count: int
    bleu: float


def corpus_scores(
    hypotheses: Sequence[str], references: References, *, tokenize: str = "13a"
) -> Scores:
    """BLEU, chrF and exact match of ``hypotheses`` against ``references``.

    ``references`` holds one string per hypothesis, or one list of strings per hypothesis.
    ``tokenize`` is BLEU's sacreBLEU tokenizer: ``'13a'`` by default, ``'none'`` for
    pre-tokenised text.
    """
    reference_lists = _reference_lists(hypotheses, references)
    streams = _reference_streams(reference_lists)
    bleu = BLEU(tokenize=tokenize)
    chrf = CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), streams)
    chrf_score = chrf.corpus_score(list(hypotheses), streams)
    matches = sum(
        hypothesis.strip() == refs[0].strip()
        for hypothesis, refs in zip(hypotheses, reference_lists, strict=True)
    )
    return Scores(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        exact_match=matches / len(hypotheses),
        signature={"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())},
        num_sentences=len(hypotheses),
    )


def bleu_n(
    hypotheses: Sequence[str], references: References, max_order: int, *, tokenize: str = "13a"
) -> float:
    """Cumulative BLEU-n: geometric mean of the 1..``max_order``-gram precisions (uniform
    weights) times the brevity penalty, 0-100, as reported in the captioning literature."""
    if not isinstance(max_order, int) or max_order < 1:
        raise ValueError(f"max_order={max_order!r} must be an integer >= 1")
    streams = _reference_streams(_reference_lists(hypotheses, references))
    metric = BLEU(tokenize=tokenize, max_ngram_order=max_order)
    return float(metric.corpus_score(list(hypotheses), streams).score)


def bleu_1_to_4(
    hypotheses: Sequence[str], references: References, *, tokenize: str = "13a"
) -> dict[str, float]:
    """``{"bleu1": ..., "bleu2": ..., "bleu3": ..., "bleu4": ...}``, each cumulative BLEU-n."""
    return {
        f"bleu{order}": bleu_n(hypotheses, references, order, tokenize=tokenize)
        for order in range(1, 5)
    }


def bleu_by_length(
    hypotheses: Sequence[str],
    references: References,
    source_lengths: Sequence[int],
    buckets: Sequence[tuple[int, int | None]] = DEFAULT_LENGTH_BUCKETS,
    *,
    tokenize: str = "13a",
) -> list[LengthBucket]:
    """Corpus BLEU per source-length bucket, for the BLEU-vs-length plot.

    Each bucket ``(low, high)`` holds the sentences with ``low <= length <= high``
    (``high=None``: no upper end). Buckets must be ascending and must not overlap; a
    sentence in no bucket is not counted. Empty buckets come back with ``bleu=NaN``.
    """
    reference_lists = _reference_lists(hypotheses, references)
    if len(source_lengths) != len(hypotheses):
        raise ValueError(
            f"got {len(source_lengths)} source lengths for {len(hypotheses)} hypotheses; "
            "give one length per hypothesis"
        )
    if any(length < 0 for length in source_lengths):
        raise ValueError("source lengths must be >= 0")
    _check_buckets(buckets)
    results = []
    for low, high in buckets:
        members = [
            index
            for index, length in enumerate(source_lengths)
            if low <= length and (high is None or length <= high)
        ]
        label = f"{low}+" if high is None else f"{low}-{high}"
        if not members:
            results.append(LengthBucket(label=label, count=0, bleu=math.nan))
            continue
        bucket_hypotheses = [hypotheses[index] for index in members]
        streams = _reference_streams([reference_lists[index] for index in members])
        score = BLEU(tokenize=tokenize).corpus_score(bucket_hypotheses, streams).score
        results.append(LengthBucket(label=label, count=len(members), bleu=float(score)))
    return results


def _reference_lists(hypotheses: Sequence[str], references: References) -> list[list[str]]:
    """Check the inputs; return one list of reference strings per hypothesis."""
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError("hypotheses and references must be lists of strings, not one string")
    if len(hypotheses) == 0:
        raise ValueError("cannot score an empty list of hypotheses")
    if len(references) != len(hypotheses):
        raise ValueError(
            f"got {len(hypotheses)} hypotheses but {len(references)} references; "
            "give one reference (or one list of references) per hypothesis"
        )
    lists = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    for index, refs in enumerate(lists):
        if not refs:
            raise ValueError(f"hypothesis {index} has no reference")
        if not all(isinstance(ref, str) for ref in refs):
            raise ValueError(f"references of hypothesis {index} must be strings")
    if not all(isinstance(hypothesis, str) for hypothesis in hypotheses):
        raise ValueError("hypotheses must be strings")
    return lists


def _reference_streams(reference_lists: list[list[str]]) -> list[list[str | None]]:
    """Per-hypothesis reference lists -> sacreBLEU's reference streams (one stream per
    reference position; ``None`` where a hypothesis has fewer references than the most)."""
    most = max(len(refs) for refs in reference_lists)
    return [
        [refs[position] if position < len(refs) else None for refs in reference_lists]
        for position in range(most)
    ]


def _check_buckets(buckets: Sequence[tuple[int, int | None]]) -> None:
    if not buckets:
        raise ValueError("give at least one length bucket")
    previous_high: int | None = -1
    for low, high in buckets:
        if high is not None and high < low:
            raise ValueError(f"bucket ({low}, {high}) ends before it starts")
        if previous_high is None or low <= previous_high:
            raise ValueError(
                f"buckets {list(buckets)} must be ascending and must not overlap "
                "(only the last may end in None)"
            )
        previous_high = high
