"""Corpus BLEU / chrF / exact match, BLEU-1..4 and BLEU by length, checked against sacreBLEU
itself and against values worked out by hand."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from qkv.evaluation import (
    LengthBucket,
    Scores,
    bleu_1_to_4,
    bleu_by_length,
    bleu_n,
    corpus_scores,
)

HYPOTHESES = [
    "the cat sat on the mat and looked at the door .",
    "a man is riding a red bicycle down the street .",
    "there is nothing to see here , move along please .",
]
REFERENCES = [
    "the cat sat on a mat and looked at the door .",
    "a man rides a red bike down the road .",
    "there is nothing to see here , move along please .",
]


def test_identical_text_scores_100():
    scores = corpus_scores(REFERENCES, REFERENCES)
    assert isinstance(scores, Scores)
    assert scores.bleu == pytest.approx(100.0)
    assert scores.chrf == pytest.approx(100.0)
    assert scores.exact_match == 1.0
    assert scores.num_sentences == 3


def test_disjoint_text_scores_about_0():
    scores = corpus_scores(["qq ww ee rr tt yy"], ["aa ss dd ff gg hh"])
    assert scores.bleu == pytest.approx(0.0, abs=1e-6)
    assert scores.chrf < 5.0
    assert scores.exact_match == 0.0


def test_matches_sacrebleu_directly():
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert 0.0 < scores.bleu < 100.0
    assert scores.exact_match == pytest.approx(1 / 3)
    assert "tok:13a" in scores.signature["bleu"]
    assert scores.signature["chrf"].startswith("nrefs:1")
    as_dict = scores.as_dict()
    assert as_dict["bleu"] == scores.bleu and as_dict["signature"] == scores.signature


def test_exact_match_strips_and_uses_the_first_reference():
    hypotheses = ["  a dog runs \n", "a cat sleeps", "a bird"]
    references = [["a dog runs", "x"], ["something else", "a cat sleeps"], ["a bird ."]]
    assert corpus_scores(hypotheses, references).exact_match == pytest.approx(1 / 3)


def test_multiple_references():
    hypotheses = ["a man rides a red bike down the road .", "two dogs play in the snow together ."]
    references = [
        ["a man is riding a bicycle on the street .", "a man rides a red bike down the road ."],
        ["dogs are playing in the snow .", "two dogs play outside in the snow ."],
    ]
    streams = [[refs[0] for refs in references], [refs[1] for refs in references]]
    scores = corpus_scores(hypotheses, references)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, streams).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(hypotheses, streams).score)
    first_only = corpus_scores(hypotheses, [refs[0] for refs in references])
    assert scores.bleu > first_only.bleu  # more references can only add matches
    assert scores.signature["bleu"].startswith("nrefs:2")


def test_a_varying_number_of_references():
    hypotheses = ["a man rides a red bike down the road .", "two dogs play in the snow together ."]
    references = [
        ["a man is riding a bicycle on the street .", "a man rides a red bike down the road ."],
        ["two dogs play outside in the snow ."],
    ]
    streams = [[refs[0] for refs in references], [references[0][1], None]]
    expected = sacrebleu.metrics.BLEU().corpus_score(hypotheses, streams).score
    assert corpus_scores(hypotheses, references).bleu == pytest.approx(expected)


def test_cumulative_bleu_1_to_4_by_hand():
    # Pre-tokenised. Matches: 1-grams 5/6, 2-grams 3/5, 3-grams 2/4, 4-grams 1/3;
    # same length, so no brevity penalty. BLEU-n is the geometric mean of the first n.
    hypotheses, references = ["the cat sat on the mat"], ["the cat sat on a mat"]
    precisions = [5 / 6, 3 / 5, 2 / 4, 1 / 3]
    expected = {f"bleu{n}": 100 * math.prod(precisions[:n]) ** (1 / n) for n in range(1, 5)}
    assert bleu_1_to_4(hypotheses, references, tokenize="none") == pytest.approx(expected)
    assert bleu_n(hypotheses, references, 2, tokenize="none") == pytest.approx(100 * math.sqrt(0.5))
    with pytest.raises(ValueError, match="max_order"):
        bleu_n(hypotheses, references, 0)


def test_tokenization_13a_splits_punctuation_and_none_does_not():
    hypotheses = ["the cat, the dog, and the bird sang a song."]
    references = ["the cat , the dog , and the bird sang a song ."]
    assert corpus_scores(hypotheses, references).bleu == pytest.approx(100.0)
    untokenised = corpus_scores(hypotheses, references, tokenize="none")
    assert untokenised.bleu < 60.0
    assert "tok:none" in untokenised.signature["bleu"]


def test_bleu_by_length_buckets():
    hypotheses = HYPOTHESES + ["one two three four five six", "alpha beta gamma delta epsilon"]
    references = REFERENCES + ["one two three four five six", "alpha beta gamma zeta epsilon"]
    lengths = [9, 12, 25, 3, 45]
    buckets = bleu_by_length(hypotheses, references, lengths)
    assert [b.label for b in buckets] == ["0-10", "11-20", "21-30", "31-40", "41+"]
    assert [b.count for b in buckets] == [2, 1, 1, 0, 1]
    assert all(isinstance(b, LengthBucket) for b in buckets)
    expected_first = sacrebleu.corpus_bleu(
        [hypotheses[0], hypotheses[3]], [[references[0], references[3]]]
    ).score
    assert buckets[0].bleu == pytest.approx(expected_first)
    assert buckets[2].bleu == pytest.approx(100.0)
    assert math.isnan(buckets[3].bleu)

    custom = bleu_by_length(hypotheses, references, lengths, buckets=((0, 5), (20, None)))
    assert [(b.label, b.count) for b in custom] == [("0-5", 1), ("20+", 2)]


def test_errors():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_scores(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty"):
        corpus_scores([], [])
    with pytest.raises(ValueError, match="not one string"):
        corpus_scores("a b", "a b")
    with pytest.raises(ValueError, match="no reference"):
        corpus_scores(["a b"], [[]])
    with pytest.raises(ValueError, match="source lengths"):
        bleu_by_length(["a"], ["a"], [1, 2])
    with pytest.raises(ValueError, match="ascending"):
        bleu_by_length(["a"], ["a"], [1], buckets=((0, 10), (5, 20)))
    with pytest.raises(ValueError, match="ends before"):
        bleu_by_length(["a"], ["a"], [1], buckets=((10, 5),))
    with pytest.raises(ValueError, match="ascending"):
        bleu_by_length(["a"], ["a"], [1], buckets=((0, None), (5, 9)))
