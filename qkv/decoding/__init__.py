"""Decoding for every qkv model: greedy and beam search over the ``Decodable`` step protocol,
and sampling from language models (temperature, top-k, top-p)."""

from .beam import beam_search, decode
from .greedy import greedy_search
from .sample import filter_logits, sample
from .search import Hypotheses, check_scores, length_penalty_factor

__all__ = [
    "greedy_search",
    "beam_search",
    "decode",
    "sample",
    "filter_logits",
    "Hypotheses",
    "length_penalty_factor",
    "check_scores",
]
