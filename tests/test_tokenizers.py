"""Character and BPE tokenizers: fixed special ids, exact round trips, save/load, errors."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
    Pair,
    load_tokenizer,
    train_tokenizer,
    training_texts,
)
from qkv.data.word_tokenizer import WordTokenizer

CORPUS = [
    Pair("Das Problem sind die Nachbarn.", "The problem is the neighbours."),
    Pair("Über Größe spricht man nicht!", "One does not talk about size!"),
    Pair("Wo ist der Bahnhof?", "Where is the station?"),
    Pair("Ich möchte einen Kaffee, bitte.", "I would like a coffee, please."),
    Pair("Straße, Fuß, Äpfel und Öl.", "Street, foot, apples and oil."),
    Pair("Das Haus ist sehr alt.", "The house is very old."),
]
TEXTS = training_texts(CORPUS) * 3
ALPHABET = sorted(set("".join(TEXTS)))


@pytest.fixture(scope="module")
def bpe():
    return train_tokenizer("bpe", TEXTS, vocab_size=120)


@pytest.fixture(scope="module")
def char():
    return train_tokenizer("char", TEXTS)


def test_training_texts_is_sources_then_targets():
    assert training_texts(CORPUS[:2]) == [
        CORPUS[0].source,
        CORPUS[1].source,
        CORPUS[0].target,
        CORPUS[1].target,
    ]


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_special_ids_are_fixed(kind, char, bpe):
    tokenizer = {"char": char, "bpe": bpe}[kind]
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert tokenizer.tokens([0, 1, 2, 3]) == list(SPECIAL_TOKENS)
    assert tokenizer.decode([BOS_ID, *tokenizer.encode("Das Haus"), EOS_ID, PAD_ID]) == "Das Haus"
    assert all(i > UNK_ID for i in tokenizer.encode("Wo ist der Bahnhof?"))


def test_char_tokenizer_by_hand():
    tokenizer = CharTokenizer.train(["abba", "cab"])
    assert tokenizer.alphabet == ["a", "b", "c"]
    assert tokenizer.vocab_size == 7
    assert tokenizer.encode("cab x") == [6, 4, 5, UNK_ID, UNK_ID]
    assert tokenizer.tokens([6, 4, UNK_ID]) == ["c", "a", "<unk>"]
    assert tokenizer.decode([6, 4, UNK_ID, 5]) == "cab"  # UNK is special: skipped
    # vocab_size keeps the most frequent characters: a and b (4 and 3), not c (1)
    assert CharTokenizer.train(["abba", "cab"], vocab_size=6).alphabet == ["a", "b"]


def test_bpe_learns_subwords_and_unknown_char_is_unk(bpe):
    ids = bpe.encode("Das Problem")
    assert len(ids) < len("Das Problem")  # merges happened
    assert "".join(bpe.tokens(ids)) == "\u2581Das\u2581Problem"
    ids = bpe.encode("Das Zebra")  # 'Z' never appears in training
    assert UNK_ID in ids
    assert bpe.tokens(ids).count("<unk>") == 1
    assert 4 < bpe.vocab_size <= 120


def test_char_tokens_show_spaces(char):
    assert char.tokens(char.encode("Öl ist")) == ["Ö", "l", "\u2581", "i", "s", "t"]


words = st.lists(st.text(alphabet=[c for c in ALPHABET if c != " "], min_size=1), min_size=1)


@settings(max_examples=30, deadline=None)
@given(words=words, kind=st.sampled_from(["char", "bpe"]))
def test_round_trip_of_known_characters(bpe, char, words, kind):
    tokenizer = {"char": char, "bpe": bpe}[kind]
    text = " ".join(words)
    ids = tokenizer.encode(text)
    assert UNK_ID not in ids
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(torch.tensor(ids)) == text  # tensors are accepted too


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_round_trip_of_every_training_text(kind, char, bpe):
    tokenizer = {"char": char, "bpe": bpe}[kind]
    for text in TEXTS:
        assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_save_load_round_trip(tmp_path, kind, char, bpe):
    tokenizer = {"char": char, "bpe": bpe}[kind]
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["kind"] == kind
    loaded = load_tokenizer(path)
    assert type(loaded) is type(tokenizer)
    assert loaded.vocab_size == tokenizer.vocab_size
    for text in TEXTS[:6] + ["Zebra über alles"]:
        assert loaded.encode(text) == tokenizer.encode(text)
    ids = list(range(loaded.vocab_size))
    assert loaded.tokens(ids) == tokenizer.tokens(ids)


def test_load_errors(tmp_path, char):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "qkv-tok', encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_tokenizer(broken)
    broken.write_text('{"hello": 1}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a qkv tokenizer file"):
        load_tokenizer(broken)
    broken.write_text('{"format": "qkv-tokenizer", "kind": "wordpiece"}', encoding="utf-8")
    with pytest.raises(ValueError, match="kind 'wordpiece'; known: char, bpe"):
        load_tokenizer(broken)
    broken.write_text(
        '{"format": "qkv-tokenizer", "kind": "bpe", "tokenizer": {}}', encoding="utf-8"
    )
    with pytest.raises(ValueError, match="corrupt bpe tokenizer"):
        load_tokenizer(broken)
    broken.write_text('{"format": "qkv-tokenizer", "kind": "char"}', encoding="utf-8")
    with pytest.raises(ValueError, match="corrupt char tokenizer"):
        load_tokenizer(broken)


def test_argument_errors(char):
    with pytest.raises(ValueError, match="unknown tokenizer kind 'word'"):
        train_tokenizer("word", TEXTS)
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer("bpe", [])
    with pytest.raises(ValueError, match="no text"):
        CharTokenizer.train([""])
    with pytest.raises(ValueError, match="outside this vocabulary"):
        char.decode([char.vocab_size])
    with pytest.raises(ValueError, match="vocab_size=4"):
        BPETokenizer.train(TEXTS, vocab_size=4)


def test_the_captions_word_tokenizer_has_the_common_interface(tmp_path):
    texts = ["a red circle", "a blue square", "a red square"]
    tokenizer = WordTokenizer.train(texts)
    assert tokenizer.words == ["a", "red", "square", "blue", "circle"]  # by count, then a-z
    assert tokenizer.vocab_size == 4 + 5
    assert tokenizer.encode("a green circle") == [4, UNK_ID, 8]
    assert tokenizer.decode([BOS_ID, 4, UNK_ID, 8, EOS_ID]) == "a circle"  # specials skipped
    assert tokenizer.tokens([4, UNK_ID]) == ["a", "<unk>"]
    assert WordTokenizer.train(texts, vocab_size=6).words == ["a", "red"]
    tokenizer.save(tmp_path / "words.json")
    loaded = load_tokenizer(tmp_path / "words.json")
    assert isinstance(loaded, WordTokenizer) and loaded.words == tokenizer.words
    # the first caption vocabulary files: {"kind": "words", "tokens": [specials, words]}
    legacy = {"kind": "words", "tokens": [*SPECIAL_TOKENS, "a", "red"]}
    (tmp_path / "old.json").write_text(json.dumps(legacy))
    assert load_tokenizer(tmp_path / "old.json").words == ["a", "red"]
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "words", "tokens": ["a", "red"]}))
    with pytest.raises(ValueError, match="corrupt words tokenizer"):
        load_tokenizer(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="unique non-empty strings without spaces"):
        WordTokenizer(["a", "a"])
