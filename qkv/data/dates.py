"""The built-in corpus: human-written dates -> ISO 8601, generated on the fly (no files).

``"the 3rd of March 1998"``, ``"3/3/98"``, ``"Tuesday, March 3, 1998"``, ``"03.03.1998"``
... all translate to ``"1998-03-03"``. It is the classic first attention task: short,
character-level, and every output character is copied or looked up from a few source
characters, so the attention map shows a clean alignment.

Conventions, chosen so that every source string names exactly one date:

- years run from 1950 to 2049; a two-digit year ``YY`` means 19YY when ``YY >= 50`` and
  20YY when ``YY < 50`` (so ``"98"`` is 1998 and ``"07"`` is 2007);
- the separator decides the field order: ``/`` is US month/day/year (``"3/4/98"`` is
  1998-03-04), ``.`` is European day.month.year (``"3.4.1998"`` is 1998-04-03), ``-`` is
  year-month-day (``"1998-3-4"``), and eight bare digits are ``YYYYMMDD``;
- weekday names are always the true weekday of the date;
- words appear as written, all lower-case or all upper-case.

The splits are disjoint in *calendar dates*, not only in strings: a date in the test split
never appears in train or valid in any format, so exact match measures generalisation.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta
from functools import lru_cache

from ..errors import InputError
from .batch import Pair

__all__ = [
    "dates_corpus",
    "format_date",
    "DATE_FORMATS",
    "DATES_SPLIT_SIZES",
    "FIRST_DAY",
    "LAST_DAY",
]

FIRST_DAY = date(1950, 1, 1)
LAST_DAY = date(2049, 12, 31)
#: Number of examples in each split; each example is a different calendar date.
DATES_SPLIT_SIZES = {"train": 20_000, "valid": 1_000, "test": 1_000}

_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_LOWER_CASE_SHARE, _UPPER_CASE_SHARE = 0.2, 0.1


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _month(day: date) -> str:
    return _MONTHS[day.month - 1]


def _month_abbr(day: date) -> str:
    return _MONTHS[day.month - 1][:3]


def _weekday(day: date) -> str:
    return _WEEKDAYS[day.weekday()]


def _short_year(day: date) -> str:
    return f"{day.year % 100:02d}"


_FORMATTERS: dict[str, Callable[[date], str]] = {
    "the_ordinal_of_month": lambda d: f"the {_ordinal(d.day)} of {_month(d)} {d.year}",
    "ordinal_month": lambda d: f"{_ordinal(d.day)} {_month(d)} {d.year}",
    "day_month": lambda d: f"{d.day} {_month(d)} {d.year}",
    "day_month_abbr_short_year": lambda d: f"{d.day} {_month_abbr(d)} {_short_year(d)}",
    "month_ordinal": lambda d: f"{_month(d)} {_ordinal(d.day)}, {d.year}",
    "month_abbr_day": lambda d: f"{_month_abbr(d)} {d.day}, {d.year}",
    "weekday_month_day": lambda d: f"{_weekday(d)}, {_month(d)} {d.day}, {d.year}",
    "weekday_abbr_day_month_abbr": lambda d: f"{_weekday(d)[:3]} {d.day} {_month_abbr(d)} {d.year}",
    "us_slash_short": lambda d: f"{d.month}/{d.day}/{_short_year(d)}",
    "us_slash_padded": lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    "european_dot_padded": lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",
    "european_dot_short": lambda d: f"{d.day}.{d.month}.{_short_year(d)}",
    "year_month_day_dash": lambda d: f"{d.year}-{d.month}-{d.day}",
    "compact_digits": lambda d: f"{d.year}{d.month:02d}{d.day:02d}",
}
#: The names of the source formats, in a fixed order (see ``format_date``).
DATE_FORMATS = tuple(_FORMATTERS)


def format_date(day: date, style: str) -> str:
    """Write ``day`` in one of ``DATE_FORMATS`` (as written, before any case change)."""
    if style not in _FORMATTERS:
        raise InputError(f"unknown date format {style!r}; choose one of {', '.join(DATE_FORMATS)}")
    if not FIRST_DAY <= day <= LAST_DAY:
        raise InputError(f"date {day} is outside the corpus range {FIRST_DAY}..{LAST_DAY}")
    return _FORMATTERS[style](day)


@lru_cache(maxsize=4)
def _splits(seed: int) -> dict[str, tuple[Pair, ...]]:
    rng = random.Random(seed)
    days = [FIRST_DAY + timedelta(days=k) for k in range((LAST_DAY - FIRST_DAY).days + 1)]
    rng.shuffle(days)
    splits, start = {}, 0
    # test and valid first, so their dates stay the same if the train size changes.
    for split in ("test", "valid", "train"):
        chosen = days[start : start + DATES_SPLIT_SIZES[split]]
        start += len(chosen)
        pairs = []
        for day in chosen:
            text = _FORMATTERS[rng.choice(DATE_FORMATS)](day)
            draw = rng.random()
            if draw < _LOWER_CASE_SHARE:
                text = text.lower()
            elif draw < _LOWER_CASE_SHARE + _UPPER_CASE_SHARE:
                text = text.upper()
            pairs.append(Pair(text, day.isoformat()))
        splits[split] = tuple(pairs)
    return splits


def dates_corpus(split: str, *, seed: int = 0) -> list[Pair]:
    """The dates corpus: ``split`` is "train" (20,000), "valid" (1,000) or "test" (1,000).

    Deterministic for a given seed; the three splits never share a calendar date.
    """
    if split not in DATES_SPLIT_SIZES:
        raise InputError(f"unknown split {split!r} for the dates corpus; use train, valid or test")
    return list(_splits(seed)[split])
