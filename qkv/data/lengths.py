"""The built-in ``lengths`` corpus: a generated translation task whose sentences run from 5
to 80 words, spread evenly over the length buckets of ``qkv evaluate --by-length``.

It exists to show the fixed-vector bottleneck (Bahdanau et al. 2015, Figure 2) in minutes:
a model that squeezes the source into one vector loses long sentences, a model that
attends does not.  So the task is not a copy: every word is translated through a fixed
bilingual lexicon (made from a seed, over 500 entries) and two local reordering rules
change the word order:

- adjective-noun swap: an adjective follows its noun (``the red cat`` -> ``le cat' red'``);
- verb-final clauses: the verb moves to the end of its clause, after its object and any
  prepositional phrase (``A sees B near C`` -> ``A' B' near' C' sees'``).

Grammar of the source (the target has the same words, translated and reordered)::

    sentence := clause (conjunction clause)*
    clause   := phrase verb phrase [preposition phrase]
    phrase   := determiner adjective{0,2} noun

A sentence's length is drawn by first choosing a bucket (5-10, 11-20, 21-30, 31-40, 41-80
words) uniformly, then a length in it uniformly.  Deterministic from the seed; fixed
train / valid / test splits without a shared source sentence; no files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from ..errors import InputError
from .batch import Pair

__all__ = [
    "LENGTHS_SPLIT_SIZES",
    "LENGTH_BUCKETS",
    "Lexicon",
    "Phrase",
    "Clause",
    "make_lexicon",
    "translate_clauses",
    "lengths_corpus",
]

#: Sentences per split.
LENGTHS_SPLIT_SIZES = {"train": 20_000, "valid": 500, "test": 1_000}
#: Source lengths in words: a bucket is drawn uniformly, then a length in it.
LENGTH_BUCKETS = ((5, 10), (11, 20), (21, 30), (31, 40), (41, 80))
#: Words of each kind in the lexicon (function words are fixed lists below).
LEXICON_SIZES = {"noun": 240, "adjective": 130, "verb": 130}

_SOURCE_SYLLABLES = "ba be bi bo du fa fe fi go ka ke ko la le li lo ma me mi mo na ne ni no pa pe pi po ra re ri ro sa se si so ta te ti to".split()  # noqa: E501
_TARGET_SYLLABLES = "ach ek ul ir ost yn zu vai kra dre gly ph qua sz tro wen xil yo zar hn".split()
_DETERMINERS = {"the": "le", "a": "un", "every": "chaque", "this": "ce", "some": "quelque"}
_PREPOSITIONS = {"near": "pres", "under": "sous", "with": "avec", "behind": "derriere"}
_CONJUNCTIONS = {"and": "et", "but": "mais", "because": "car", "while": "pendant"}


@dataclass(frozen=True)
class Lexicon:
    """Source word -> target word, and the source words of each kind."""

    words: dict[str, str]
    nouns: tuple[str, ...]
    adjectives: tuple[str, ...]
    verbs: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.words)


@dataclass(frozen=True)
class Phrase:
    """determiner adjective* noun."""

    determiner: str
    adjectives: tuple[str, ...]
    noun: str

    def source(self) -> list[str]:
        return [self.determiner, *self.adjectives, self.noun]

    def target(self, lexicon: Lexicon) -> list[str]:  # adjectives follow the noun
        return [lexicon.words[w] for w in (self.determiner, self.noun, *self.adjectives)]


@dataclass(frozen=True)
class Clause:
    """subject verb object [preposition phrase], joined to the clause before it by
    ``conjunction`` (None for the first clause)."""

    subject: Phrase
    verb: str
    object: Phrase
    preposition: str | None = None
    place: Phrase | None = None
    conjunction: str | None = None

    def source(self) -> list[str]:
        words = [self.conjunction] if self.conjunction else []
        words += [*self.subject.source(), self.verb, *self.object.source()]
        if self.preposition and self.place:
            words += [self.preposition, *self.place.source()]
        return words

    def target(self, lexicon: Lexicon) -> list[str]:  # the verb goes last
        words = [lexicon.words[self.conjunction]] if self.conjunction else []
        words += [*self.subject.target(lexicon), *self.object.target(lexicon)]
        if self.preposition and self.place:
            words += [lexicon.words[self.preposition], *self.place.target(lexicon)]
        return [*words, lexicon.words[self.verb]]


def make_lexicon(seed: int) -> Lexicon:
    """A fixed lexicon: pseudo-words of two made-up languages, one entry per source word."""
    rng = random.Random(f"lexicon-{seed}")
    fixed = {**_DETERMINERS, **_PREPOSITIONS, **_CONJUNCTIONS}
    source_taken, target_taken = set(fixed), set(fixed.values())
    words, kinds = dict(fixed), {}
    for kind, count in LEXICON_SIZES.items():
        chosen = []
        while len(chosen) < count:
            source = _pseudo_word(rng, _SOURCE_SYLLABLES, 2, 3)
            target = _pseudo_word(rng, _TARGET_SYLLABLES, 1, 3)
            if source in source_taken or target in target_taken:
                continue
            source_taken.add(source)
            target_taken.add(target)
            words[source] = target
            chosen.append(source)
        kinds[kind] = tuple(chosen)
    return Lexicon(words, kinds["noun"], kinds["adjective"], kinds["verb"])


def _pseudo_word(rng: random.Random, syllables: list[str], shortest: int, longest: int) -> str:
    return "".join(rng.choice(syllables) for _ in range(rng.randint(shortest, longest)))


def translate_clauses(clauses: list[Clause], lexicon: Lexicon) -> Pair:
    """The sentence pair the clauses make: the source as written, the target translated
    and reordered."""
    source = [word for clause in clauses for word in clause.source()]
    target = [word for clause in clauses for word in clause.target(lexicon)]
    return Pair(" ".join(source), " ".join(target))


_DETERMINER_LIST, _PREPOSITION_LIST = list(_DETERMINERS), list(_PREPOSITIONS)
_CONJUNCTION_LIST = list(_CONJUNCTIONS)


def _phrase(rng: random.Random, lexicon: Lexicon) -> Phrase:
    count = rng.choice((0, 0, 1, 1, 2))
    adjectives = tuple(rng.sample(lexicon.adjectives, count)) if count else ()
    return Phrase(rng.choice(_DETERMINER_LIST), adjectives, rng.choice(lexicon.nouns))


def _clause(rng: random.Random, lexicon: Lexicon, conjunction: str | None) -> Clause:
    subject, verb, obj = _phrase(rng, lexicon), rng.choice(lexicon.verbs), _phrase(rng, lexicon)
    if rng.random() < 0.4:
        place = _phrase(rng, lexicon)
        return Clause(subject, verb, obj, rng.choice(_PREPOSITION_LIST), place, conjunction)
    return Clause(subject, verb, obj, conjunction=conjunction)


def _sentence(rng: random.Random, lexicon: Lexicon) -> list[Clause]:
    """Clauses whose source length falls in a bucket drawn uniformly, near a length drawn
    uniformly in that bucket (redrawn until it lands in the bucket)."""
    low, high = rng.choice(LENGTH_BUCKETS)
    while True:
        wanted = rng.randint(low, high)
        clauses = [_clause(rng, lexicon, None)]
        length = len(clauses[0].source())
        while length < wanted:
            clauses.append(_clause(rng, lexicon, rng.choice(_CONJUNCTION_LIST)))
            length += len(clauses[-1].source())
        if low <= length <= high:
            return clauses


@lru_cache(maxsize=2)
def _splits(seed: int) -> dict[str, tuple[Pair, ...]]:
    lexicon = make_lexicon(seed)
    rng = random.Random(f"sentences-{seed}")
    seen: set[str] = set()
    splits = {}
    # test and valid first, so that they stay the same if the train size changes
    for split in ("test", "valid", "train"):
        pairs: list[Pair] = []
        while len(pairs) < LENGTHS_SPLIT_SIZES[split]:
            pair = translate_clauses(_sentence(rng, lexicon), lexicon)
            if pair.source not in seen:
                seen.add(pair.source)
                pairs.append(pair)
        splits[split] = tuple(pairs)
    return splits


def lengths_corpus(split: str, *, seed: int = 0) -> list[Pair]:
    """The ``lengths`` corpus: ``split`` is "train" (20,000), "valid" (500) or "test"
    (1,000) sentence pairs of 5-80 words, the same for the same seed."""
    if split not in LENGTHS_SPLIT_SIZES:
        raise InputError(
            f"unknown split {split!r} for the lengths corpus; use train, valid or test"
        )
    return list(_splits(seed)[split])
