"""The ``lengths`` corpus: deterministic, disjoint splits, lengths spread evenly over the
buckets of --by-length, a real lexicon, and the two reordering rules."""

import collections
import json

import pytest

from qkv.data import available_corpora, load_corpus
from qkv.data.lengths import (
    LENGTH_BUCKETS,
    LENGTHS_SPLIT_SIZES,
    Clause,
    Phrase,
    lengths_corpus,
    make_lexicon,
    translate_clauses,
)
from qkv.errors import InputError


def test_it_is_a_built_in_corpus_deterministic_from_the_seed():
    assert "lengths" in available_corpora()
    assert load_corpus("lengths", "test") == lengths_corpus("test") == lengths_corpus("test")
    assert lengths_corpus("test", seed=1)[:20] != lengths_corpus("test")[:20]
    assert make_lexicon(0) == make_lexicon(0) and make_lexicon(0) != make_lexicon(1)
    with pytest.raises(InputError, match="unknown split 'dev'"):
        lengths_corpus("dev")


def test_the_splits_have_their_sizes_and_share_no_sentence():
    splits = {split: lengths_corpus(split) for split in LENGTHS_SPLIT_SIZES}
    assert {split: len(pairs) for split, pairs in splits.items()} == LENGTHS_SPLIT_SIZES
    sources = {split: {p.source for p in pairs} for split, pairs in splits.items()}
    assert sum(len(s) for s in sources.values()) == sum(LENGTHS_SPLIT_SIZES.values())
    assert not sources["train"] & sources["test"] and not sources["valid"] & sources["test"]
    assert not sources["train"] & sources["valid"]


def _bucket(length: int) -> int:
    return next(i for i, (low, high) in enumerate(LENGTH_BUCKETS) if low <= length <= high)


@pytest.mark.parametrize("split", ["train", "test"])
def test_lengths_run_from_5_to_80_words_evenly_over_the_buckets(split):
    lengths = [len(p.source.split()) for p in lengths_corpus(split)]
    assert min(lengths) == 5 and max(lengths) == 80
    counts = collections.Counter(_bucket(length) for length in lengths)
    for bucket in range(len(LENGTH_BUCKETS)):  # 20 % each, within sampling noise
        assert 0.16 < counts[bucket] / len(lengths) < 0.24, counts
    assert [b[0] for b in LENGTH_BUCKETS[1:]] == [11, 21, 31, 41]  # the --by-length buckets


def test_the_lexicon_has_over_500_entries_one_target_word_each():
    lexicon = make_lexicon(0)
    assert len(lexicon) >= 500
    assert len(set(lexicon.words.values())) == len(lexicon)  # a bijection
    assert not set(lexicon.words) & set(lexicon.words.values())  # two languages


def test_the_reordering_rules_on_a_hand_checked_clause():
    lexicon = make_lexicon(0)
    noun, other, place = lexicon.nouns[:3]
    big, red = lexicon.adjectives[:2]
    verb = lexicon.verbs[0]
    clauses = [
        Clause(Phrase("the", (big, red), noun), verb, Phrase("a", (), other)),
        Clause(Phrase("every", (), other), verb, Phrase("the", (red,), noun), "near",
               Phrase("this", (), place), conjunction="but"),
    ]  # fmt: skip
    pair = translate_clauses(clauses, lexicon)
    assert pair.source.split() == [
        "the", big, red, noun, verb, "a", other,
        "but", "every", other, verb, "the", red, noun, "near", "this", place,
    ]  # fmt: skip
    t = lexicon.words
    # adjectives after their noun; the verb at the end of its clause, after the place
    assert pair.target.split() == [
        "le", t[noun], t[big], t[red], "un", t[other], t[verb],
        "mais", "chaque", t[other], "le", t[noun], t[red], "pres", "ce", t[place], t[verb],
    ]  # fmt: skip


def test_every_target_translates_its_source_word_for_word_but_not_in_order():
    lexicon = make_lexicon(0)
    pairs = lengths_corpus("test")
    reordered = 0
    for pair in pairs:
        translated = [lexicon.words[word] for word in pair.source.split()]
        assert sorted(translated) == sorted(pair.target.split())
        reordered += translated != pair.target.split()
    assert reordered == len(pairs)  # every clause has a verb that moves


@pytest.fixture
def small_train_split(monkeypatch):
    """300 training and 20 validation sentences instead of 20,000 and 500 (BPE on the full
    split and decoding the validation sentences take a while)."""
    import qkv.data.lengths as lengths

    lengths._splits.cache_clear()
    monkeypatch.setitem(lengths.LENGTHS_SPLIT_SIZES, "train", 300)
    monkeypatch.setitem(lengths.LENGTHS_SPLIT_SIZES, "valid", 20)
    yield
    lengths._splits.cache_clear()


def test_train_and_evaluate_by_length_through_the_cli(small_train_split, tmp_path, capsys):
    from qkv.cli.main import main

    out = tmp_path / "run"
    train = ["train", "translation", "--data", "lengths", "--out", str(out), "--vocab-size"]
    train += ["400", "--max-steps", "1", "--max-tokens", "2048", "--threads", "1"]
    assert main([*train, "--model", "rnn", "--device", "cpu"]) == 0
    evaluate = ["evaluate", "--checkpoint", str(out), "--data", "lengths", "--by-length"]
    capsys.readouterr()
    assert main([*evaluate, "--json", "--limit", "30", "--beam", "1"]) == 0
    buckets = json.loads(capsys.readouterr().out)["by_length"]
    expected = collections.Counter(
        _bucket(len(p.source.split())) for p in lengths_corpus("test")[:30]
    )
    assert [b["count"] for b in buckets] == [expected[i] for i in range(5)]
