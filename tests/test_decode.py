"""decode(): greedy search for a beam of one, beam search otherwise, with the defaults the
tasks rely on (decoding's special ids are qkv.data's)."""

from __future__ import annotations

import pytest

from qkv.data import BOS_ID, EOS_ID, PAD_ID
from qkv.decoding import beam_search, decode, greedy_search
from qkv.decoding.search import DEFAULT_BOS_ID, DEFAULT_EOS_ID, DEFAULT_PAD_ID
from tests.test_decoding import MODEL, scripted_source


def test_decoding_defaults_are_the_data_special_ids():
    assert (DEFAULT_PAD_ID, DEFAULT_BOS_ID, DEFAULT_EOS_ID) == (PAD_ID, BOS_ID, EOS_ID)


def test_a_beam_of_one_is_greedy_search():
    found = decode(MODEL, scripted_source(0), beam=1, length_penalty=0.0, max_len=6)
    expected = greedy_search(MODEL, scripted_source(0), max_len=6)
    assert (found.tokens, found.scores) == (expected.tokens, expected.scores)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_a_wider_beam_is_beam_search_with_its_length_penalty(length_penalty):
    found = decode(MODEL, scripted_source(0), beam=2, length_penalty=length_penalty, max_len=6)
    expected = beam_search(
        MODEL, scripted_source(0), beam_size=2, length_penalty=length_penalty, max_len=6
    )
    greedy = greedy_search(MODEL, scripted_source(0), max_len=6)
    assert (found.tokens, found.scores) == (expected.tokens, expected.scores)
    assert found.tokens != greedy.tokens  # the scripted model's beam finds the better path
