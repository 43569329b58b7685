"""The built-in corpora (dates, ding-de-en) and the corpus registry."""

import os
import re
from datetime import date, datetime

import pytest

from qkv.data import (
    DATE_FORMATS,
    DING_PATH,
    Pair,
    available_corpora,
    dates_corpus,
    default_tokenizer_kind,
    ding_de_en,
    format_date,
    load_corpus,
)

# ---------------------------------------------------------------- dates

# The documented conventions, written independently of qkv.data.dates: strptime patterns
# (case-insensitive), ordinals and "the ... of" removed, two-digit years pivoting at 50.
PATTERNS = [
    "%d %B %Y",
    "%d %b %Y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%A, %B %d, %Y",
    "%a %d %b %Y",
    "%m/%d/%Y",
    "%d.%m.%Y",
    "%Y-%m-%d",
    "%Y%m%d",
]


def parse_date(text: str) -> date:
    """Every date the text can mean under PATTERNS; it must be exactly one."""
    text = re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text, flags=re.IGNORECASE)
    text = re.sub(r"^the (\d+) of ", r"\1 ", text, flags=re.IGNORECASE)
    # a two-digit year at the end: 50..99 -> 19YY, 00..49 -> 20YY
    text = re.sub(r"(?<=[ /.])(\d\d)$", lambda m: ("19" if int(m[1]) >= 50 else "20") + m[1], text)
    readings = set()
    for pattern in PATTERNS:
        try:
            readings.add(datetime.strptime(text, pattern).date())
        except ValueError:
            continue
    assert len(readings) == 1, f"{text!r} reads as {readings}"
    return readings.pop()


def test_dates_examples_of_every_format():
    day = date(1998, 3, 3)  # a Tuesday
    written = {style: format_date(day, style) for style in DATE_FORMATS}
    assert written["the_ordinal_of_month"] == "the 3rd of March 1998"
    assert written["us_slash_short"] == "3/3/98"
    assert written["weekday_month_day"] == "Tuesday, March 3, 1998"
    assert written["european_dot_padded"] == "03.03.1998"
    assert written["day_month_abbr_short_year"] == "3 Mar 98"
    assert format_date(date(2011, 4, 12), "month_ordinal") == "April 12th, 2011"
    assert format_date(date(2001, 11, 22), "ordinal_month") == "22nd November 2001"
    assert format_date(date(2007, 3, 4), "us_slash_short") == "3/4/07"  # month first
    assert format_date(date(2007, 3, 4), "european_dot_short") == "4.3.07"  # day first
    for text in written.values():
        assert parse_date(text) == day


def test_dates_targets_are_the_dates_the_sources_name():
    pairs = dates_corpus("train")
    assert len(pairs) == 20_000
    for source, target in pairs[::40] + dates_corpus("test")[::10]:
        assert target == parse_date(source).isoformat()
        assert date.fromisoformat(target).year in range(1950, 2050)


def test_dates_weekdays_are_true():
    weekdays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    checked = 0
    for source, target in dates_corpus("train")[:4000]:
        named = [i for i, name in enumerate(weekdays) if name[:3] in source.lower()[:3]]
        if named:
            assert named == [date.fromisoformat(target).weekday()], source
            checked += 1
    assert checked > 300


def test_dates_uses_every_format_and_both_cases():
    sources = [pair.source for pair in dates_corpus("train")]
    assert any(s.islower() and s[0].isalpha() for s in sources)
    assert any(s.isupper() for s in sources)
    # each format has its own shape; every one appears
    assert any(re.fullmatch(r"\d{8}", s) for s in sources)
    assert any(re.fullmatch(r"\d{1,2}/\d{1,2}/\d\d", s) for s in sources)
    assert any(re.fullmatch(r"the \d+(st|nd|rd|th) of \w+ \d{4}", s, re.I) for s in sources)


def test_dates_deterministic_and_splits_disjoint():
    splits = {split: dates_corpus(split) for split in ("train", "valid", "test")}
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [20_000, 1_000, 1_000]
    assert dates_corpus("test") == splits["test"]
    assert dates_corpus("test", seed=1) != splits["test"]
    days = {split: {target for _, target in pairs} for split, pairs in splits.items()}
    assert len(days["train"]) == 20_000  # one example per calendar date
    assert not days["train"] & days["test"]
    assert not days["train"] & days["valid"]
    assert not days["valid"] & days["test"]


def test_dates_returns_a_copy():
    pairs = dates_corpus("valid")
    pairs.clear()
    assert len(dates_corpus("valid")) == 1_000


# ---------------------------------------------------------------- ding-de-en

needs_ding = pytest.mark.skipif(
    not os.path.exists(DING_PATH), reason=f"{DING_PATH} missing: apt-get install trans-de-en"
)


@pytest.fixture(scope="module")
def ding():
    return {split: ding_de_en(split) for split in ("train", "valid", "test")}


@needs_ding
def test_ding_sizes_and_known_pair(ding):
    total = sum(len(pairs) for pairs in ding.values())
    assert total >= 18_000
    assert len(ding["test"]) == 1_000
    assert len(ding["valid"]) == 1_000
    every = [pair for pairs in ding.values() for pair in pairs]
    assert len(set(every)) == total  # deduplicated
    assert Pair("Das Problem sind die Nachbarn.", "The problem is the neighbours.") in every


@needs_ding
def test_ding_pairs_are_clean_sentences(ding):
    for source, target in (pair for pairs in ding.values() for pair in pairs):
        assert not re.search(r"[{}\[\]<>]", source + target), (source, target)
        for text in (source, target):
            assert text[0].isupper() and text[-1] in ".?!" and text == text.strip()
        assert len(target.split()) >= 4


@needs_ding
def test_ding_splits_are_disjoint_and_deterministic(ding):
    def sentences(split):
        return {s for pair in ding[split] for s in pair}

    assert not sentences("train") & sentences("test")
    assert not sentences("train") & sentences("valid")
    assert not sentences("valid") & sentences("test")
    assert ding_de_en("test") == ding["test"]
    assert ding_de_en("test", seed=1) != ding["test"]


def test_ding_missing_file_says_how_to_install(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install trans-de-en"):
        ding_de_en("train", path=str(tmp_path / "de-en"))


def test_ding_parses_entries(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(
        "# comment :: line\n"
        "sein {vi} | Er ist {ugs.} hier, oder?; Ist er hier? | Kein Satz :: to be {was, were; "
        "been} | He is [coll.] here, isn't he?; Is he here? | no sentence\n"
        "Mehr | Das passt nicht. :: Unequal | counts | here.\n"
        "Ja. | Das Haus <Häuser> ist sehr alt. :: Yes. | The house is very old.\n",
        encoding="utf-8",
    )
    assert ding_de_en("train", path=str(path)) + ding_de_en("test", path=str(path)) == [
        Pair("Er ist hier, oder?", "He is here, isn't he?"),
        Pair("Das Haus ist sehr alt.", "The house is very old."),
    ]


# ---------------------------------------------------------------- registry


def test_registry_names_and_tokenizer_kinds():
    assert available_corpora() == ["dates", "ding-de-en", "bible-en-es", "lengths"]
    assert default_tokenizer_kind("lengths") == "bpe"
    assert default_tokenizer_kind("dates") == "char"
    assert default_tokenizer_kind("ding-de-en") == "bpe"
    assert default_tokenizer_kind("my.tsv") == "bpe"
    assert load_corpus("dates", "valid") == dates_corpus("valid")


def test_registry_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown corpus 'wmt'.*dates, ding-de-en.*\.tsv"):
        load_corpus("wmt")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_corpus("dates", "dev")
    with pytest.raises(ValueError, match="exactly one comma"):
        load_corpus("a.de,b.en,c.fr")
    with pytest.raises(ValueError, match="must be a .tsv file"):
        load_corpus(str(tmp_path / "corpus.txt"))
    with pytest.raises(FileNotFoundError):
        load_corpus(str(tmp_path / "missing.tsv"))


def test_registry_loads_files_with_split_placeholder(tmp_path):
    for split in ("train", "valid"):
        (tmp_path / f"{split}.tsv").write_text(f"{split} de\t{split} en\n", encoding="utf-8")
        (tmp_path / f"{split}.de").write_text(f"{split} de\n", encoding="utf-8")
        (tmp_path / f"{split}.en").write_text(f"{split} en\n", encoding="utf-8")
    expected = [Pair("valid de", "valid en")]
    assert load_corpus(str(tmp_path / "{split}.tsv"), "valid") == expected
    assert load_corpus(f"{tmp_path}/{{split}}.de,{tmp_path}/{{split}}.en", "valid") == expected
    # without the placeholder, a file is the same for every split
    assert load_corpus(str(tmp_path / "train.tsv"), "test") == [Pair("train de", "train en")]
