"""Decoding for every qkv model: greedy and beam search over the ``Decodable`` step protocol."""

from .beam import beam_search
from .greedy import greedy_search
from .search import Hypotheses, length_penalty_factor

__all__ = ["greedy_search", "beam_search", "Hypotheses", "length_penalty_factor"]
