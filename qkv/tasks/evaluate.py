"""What `qkv evaluate` asks and answers: an :class:`EvaluationRequest` in, an
:class:`Evaluation` (JSON-able scores and the lines that say them) out.  Each family scores
its own checkpoints by what its task means (its record's ``score``: BLEU / chrF for
translators, BLEU-1..4 and grounding for captioners, accuracy for classifiers, perplexity
for language models; :func:`qkv.families.evaluate_checkpoint` picks the family)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..decoding.search import check_search
from ..errors import CheckpointError, InputError
from ..training import load_checkpoint
from .translator import reading_errors

__all__ = ["EvaluationRequest", "Evaluation", "trained_on", "data_to_score"]


@dataclass(frozen=True)
class EvaluationRequest:
    """What to score.  data: a corpus, JSON, folder or text file (None: the data the
    checkpoint was trained on); split: None is "test" (a language model's text has no test
    split: "valid"); limit: only the first N items; images: a Karpathy JSON's picture folder;
    by_length: translators also give BLEU per source length."""

    data: str | None = None
    split: str | None = None
    beam: int = 4
    limit: int | None = None
    device: str = "cpu"
    images: str | None = None
    by_length: bool = False

    def __post_init__(self) -> None:
        if self.limit is not None and (isinstance(self.limit, bool) or self.limit < 1):
            raise InputError(
                f"limit={self.limit} must be a positive number of items", fields=("limit",)
            )
        check_search(self.beam)


@dataclass(frozen=True)
class Evaluation:
    """What a scorer found: ``scores`` (JSON-able) and ``lines`` that say them in words."""

    scores: Mapping[str, object]
    lines: list[str] = field(default_factory=list)


def trained_on(checkpoint: str | Path) -> str | None:
    """The ``data`` the run of ``checkpoint`` trained on (what is scored when none is given)."""
    with reading_errors(CheckpointError):
        setup = load_checkpoint(checkpoint, load_tokenizers=False).metadata.get("setup", {})
    return setup.get("data") if isinstance(setup, dict) else None


def data_to_score(checkpoint: str | Path, request: EvaluationRequest) -> str:
    """The data a request scores: its own, else the data the checkpoint's run trained on."""
    data = request.data or trained_on(checkpoint)
    if data is None:
        raise CheckpointError(
            f"{checkpoint} does not say which data it was trained on; give the data to score "
            "(--data)"
        )
    return data
