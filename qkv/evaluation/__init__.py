"""Scoring decoded text: corpus BLEU, chrF, exact match, BLEU-1..4 and BLEU by length."""

from .metrics import (
    LengthBucket,
    Scores,
    bleu_1_to_4,
    bleu_by_length,
    bleu_n,
    corpus_scores,
)

__all__ = ["Scores", "LengthBucket", "corpus_scores", "bleu_n", "bleu_1_to_4", "bleu_by_length"]
