"""Greedy and beam search on hand-scripted step models, and on a tiny random GRU model.

Vocabulary of the scripted models: 0 PAD, 1 BOS, 2 EOS (E), 3 "a", 4 "b".
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from qkv.decoding import Hypotheses, beam_search, greedy_search, length_penalty_factor
from qkv.models.base import StepOutput

E, A, B_ = 2, 3, 4
SOURCE_LEN = 8  # scripted models attend over 8 positions; max_len must stay below it


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy machine lose a lot."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def probs(*, eos: float = 0.0, a: float = 0.0, b: float = 0.0) -> list[float]:
    return [0.0, 0.0, eos, a, b]


# Greedy takes "a" (0.5) then EOS (0.4): 0.2. Beam finds "b a" E: 0.4 * 0.9 * 0.9 = 0.324.
LOCAL_TRAP = {
    (): probs(a=0.5, b=0.4, eos=0.1),
    (A,): probs(a=0.35, b=0.25, eos=0.4),
    (B_,): probs(a=0.9, b=0.05, eos=0.05),
    (B_, A): probs(eos=0.9, a=0.06, b=0.04),
    (A, A): probs(eos=0.5, a=0.3, b=0.2),
}
# Ending at once (0.5) beats "a a" E (0.45 * 0.9 * 0.9 = 0.3645) on raw log-probs; a strong
# enough length penalty (alpha=2, not alpha=1) prefers the longer one.
SHORT_OR_LONG = {
    (): probs(eos=0.5, a=0.45, b=0.05),
    (A,): probs(a=0.9, eos=0.05, b=0.05),
    (A, A): probs(eos=0.9, a=0.06, b=0.04),
}
TABLES = [LOCAL_TRAP, SHORT_OR_LONG]
FALLBACK = probs(eos=0.6, a=0.25, b=0.15)


class ScriptedModel:
    """Next-token probabilities looked up by prefix; source[:, 0] picks the table.

    The state is the prefix read so far (BOS first), so a beam that is not reordered
    correctly reads the wrong row. The step's "attention" (B, S) is that prefix written out
    (zero-padded), so each attention row names the exact hypothesis that produced it.
    """

    def __init__(self, tables: list[dict[tuple[int, ...], list[float]]]):
        self.tables = tables

    def start(self, source: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "table": source[:, 0].clone(),
            "prefix": torch.zeros(source.shape[0], 0, dtype=torch.long, device=source.device),
            "positions": torch.zeros_like(source, dtype=torch.float64),
        }

    def step(
        self, tokens: torch.Tensor, state: dict[str, torch.Tensor], *, need_attention: bool = True
    ) -> StepOutput:
        prefix = torch.cat([state["prefix"], tokens.unsqueeze(1)], dim=1)  # (B, t)
        rows = []
        for table_id, row in zip(state["table"].tolist(), prefix.tolist(), strict=True):
            rows.append(self.tables[table_id].get(tuple(row[1:]), FALLBACK))
        log_probs = torch.tensor(rows, dtype=torch.float64, device=tokens.device).log()
        attention = state["positions"].clone()
        attention[:, : prefix.shape[1]] = prefix.to(attention.dtype)
        return StepOutput(log_probs, {**state, "prefix": prefix}, attention)


def scripted_source(*table_ids: int) -> torch.Tensor:
    source = torch.full((len(table_ids), SOURCE_LEN), 5, dtype=torch.long)
    source[:, 0] = torch.tensor(table_ids)
    return source


def log(*ps: float) -> float:
    return sum(math.log(p) for p in ps)


MODEL = ScriptedModel(TABLES)


def test_greedy_takes_the_locally_best_token():
    result = greedy_search(MODEL, scripted_source(0), max_len=6)
    assert result.tokens == [[A]]
    assert result.scores == pytest.approx([log(0.5, 0.4)])
    assert result.normalized_scores == result.scores
    assert result.finished == [True]


def test_beam_finds_the_better_sequence():
    result = beam_search(MODEL, scripted_source(0), beam_size=2, max_len=6, length_penalty=0.0)
    assert result.tokens == [[B_, A]]
    assert result.scores == pytest.approx([log(0.4, 0.9, 0.9)])
    assert result.finished == [True]


def test_beam_three_n_best_in_order():
    # Step 1 keeps a (.5), b (.4) and the finished [] (.1); step 2 keeps "b a" (.36),
    # "a" E (.2), "a a" (.175); step 3 ends all three.
    result = beam_search(
        MODEL, scripted_source(0), beam_size=3, max_len=6, length_penalty=0.0, num_return=3
    )
    assert result.num_return == 3 and len(result) == 3
    assert result.tokens == [[B_, A], [A], [A, A]]
    assert result.scores == pytest.approx([log(0.4, 0.9, 0.9), log(0.5, 0.4), log(0.5, 0.35, 0.5)])
    assert result.finished == [True, True, True]


def test_early_end_competes_and_wins_without_length_penalty():
    for beam_size in (1, 2, 3):
        result = beam_search(
            MODEL, scripted_source(1), beam_size=beam_size, max_len=6, length_penalty=0.0
        )
        assert result.tokens == [[]]
        assert result.scores == pytest.approx([math.log(0.5)])
    nbest = beam_search(
        MODEL, scripted_source(1), beam_size=2, max_len=6, length_penalty=0.0, num_return=2
    )
    assert nbest.tokens == [[], [A, A]]
    assert nbest.scores == pytest.approx([log(0.5), log(0.45, 0.9, 0.9)])


def test_length_penalty_changes_the_winner():
    def lp(length: int, alpha: float) -> float:
        return ((5 + length) / 6) ** alpha

    short, long = math.log(0.5), log(0.45, 0.9, 0.9)
    # alpha=1: -0.693 / 1 beats -1.009 / (8/6) = -0.757; alpha=2: -1.009 / (8/6)^2 = -0.568 wins.
    assert short / lp(1, 1.0) > long / lp(3, 1.0)
    assert short / lp(1, 2.0) < long / lp(3, 2.0)
    one = beam_search(MODEL, scripted_source(1), beam_size=2, max_len=6, length_penalty=1.0)
    assert one.tokens == [[]]
    two = beam_search(MODEL, scripted_source(1), beam_size=2, max_len=6, length_penalty=2.0)
    assert two.tokens == [[A, A]]
    assert two.scores == pytest.approx([long])
    assert two.normalized_scores == pytest.approx([long / lp(3, 2.0)])


def test_length_penalty_factor_is_gnmt():
    lengths = torch.tensor([1, 4, 10])
    assert length_penalty_factor(lengths, 0.0).tolist() == [1.0, 1.0, 1.0]
    expected = [((5 + n) / 6) ** 0.6 for n in (1, 4, 10)]
    assert length_penalty_factor(lengths, 0.6).tolist() == pytest.approx(expected)


def test_max_len_truncates():
    greedy = greedy_search(MODEL, scripted_source(0), max_len=1)
    assert greedy.tokens == [[A]] and greedy.finished == [False]
    assert greedy.scores == pytest.approx([math.log(0.5)])
    # After two steps the beam holds "b a" (alive, .36) and "a" E (finished, .2).
    beam = beam_search(MODEL, scripted_source(0), beam_size=2, max_len=2, length_penalty=0.0)
    assert beam.tokens == [[B_, A]] and beam.finished == [False]
    assert beam.scores == pytest.approx([log(0.4, 0.9)])


def test_beam_one_equals_greedy_on_scripted_model():
    source = scripted_source(0, 1, 1, 0)
    greedy = greedy_search(MODEL, source, max_len=6)
    for alpha in (0.0, 1.0, 2.0):
        beam = beam_search(MODEL, source, beam_size=1, max_len=6, length_penalty=alpha)
        assert beam.tokens == greedy.tokens
        assert beam.scores == greedy.scores


def of_source(hypotheses: Hypotheses, index: int) -> Hypotheses:
    """The ``num_return`` hypotheses of source ``index`` in a batched search (entries
    ``index * num_return`` onwards, as :class:`Hypotheses` documents)."""
    rows = slice(index * hypotheses.num_return, (index + 1) * hypotheses.num_return)
    attention = None if hypotheses.attention is None else hypotheses.attention[rows]
    return Hypotheses(
        tokens=hypotheses.tokens[rows],
        scores=hypotheses.scores[rows],
        normalized_scores=hypotheses.normalized_scores[rows],
        finished=hypotheses.finished[rows],
        attention=attention,
        num_return=hypotheses.num_return,
    )


def test_batched_equals_one_by_one_on_scripted_model():
    source = scripted_source(0, 1, 0)
    for beam_size in (2, 3):
        batched = beam_search(MODEL, source, beam_size=beam_size, max_len=6, num_return=2)
        for index in range(3):
            alone = beam_search(
                MODEL, source[index : index + 1], beam_size=beam_size, max_len=6, num_return=2
            )
            assert of_source(batched, index).tokens == alone.tokens
            assert of_source(batched, index).scores == alone.scores


def expected_attention(tokens: list[int]) -> torch.Tensor:
    """Row t: the prefix BOS, tokens[:t] the model read when it produced tokens[t]."""
    rows = torch.zeros(len(tokens), SOURCE_LEN, dtype=torch.float64)
    for t in range(len(tokens)):
        prefix = [1, *tokens[:t]]
        rows[t, : len(prefix)] = torch.tensor(prefix, dtype=torch.float64)
    return rows


def test_attention_rows_follow_the_backtracked_beam():
    source = scripted_source(0, 1)
    beam = beam_search(MODEL, source, beam_size=3, max_len=6, num_return=3, need_attention=True)
    greedy = greedy_search(MODEL, source, max_len=6, need_attention=True)
    for result in (beam, greedy):
        assert result.attention is not None
        for tokens, attention in zip(result.tokens, result.attention, strict=True):
            assert attention.shape == (len(tokens), SOURCE_LEN)
            assert torch.equal(attention, expected_attention(tokens))
    assert beam.tokens[0] == [B_, A]  # the best path changed slots on the way
    assert greedy.attention is not None and greedy.attention[0].shape == (1, SOURCE_LEN)


def test_guard_rails():
    source = scripted_source(0)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(MODEL, source, beam_size=0, max_len=3)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(MODEL, source, beam_size=2, max_len=0)
    with pytest.raises(ValueError, match="max_len"):
        greedy_search(MODEL, source, max_len=0)
    with pytest.raises(ValueError, match="num_return"):
        beam_search(MODEL, source, beam_size=2, max_len=3, num_return=3)
    with pytest.raises(TypeError, match="Decodable"):
        greedy_search(nn.Linear(2, 2), source, max_len=3)
    with pytest.raises(TypeError, match="Decodable"):
        beam_search(object(), source, max_len=3)

    class NoAttention(ScriptedModel):
        def step(self, tokens, state, *, need_attention=True):
            output = super().step(tokens, state)
            return StepOutput(output.log_probs, output.state, None)

    with pytest.raises(ValueError, match="need_attention"):
        beam_search(NoAttention(TABLES), source, max_len=3, need_attention=True)
    result = beam_search(NoAttention(TABLES), source, max_len=3)
    assert isinstance(result, Hypotheses) and result.attention is None


class RandomTable:
    """A table with a random (but fixed per seed) distribution over E, a, b for every prefix."""

    def __init__(self, seed: int):
        self.seed = seed

    def get(self, prefix: tuple[int, ...], default: list[float]) -> list[float]:
        generator = random.Random(f"{self.seed}:{prefix}")
        weights = [generator.random() + 0.05 for _ in range(3)]
        eos, a, b = (w / sum(weights) for w in weights)
        return probs(eos=eos, a=a, b=b)


def reference_beam(
    table: RandomTable, beam_size: int, max_len: int, alpha: float
) -> list[tuple[list[int], float]]:
    """The documented algorithm, one source, plain Python: K slots, finished hypotheses kept
    with frozen scores, candidates ranked by score / ((5 + length) / 6) ** alpha."""

    def key(hypothesis: tuple[tuple[int, ...], float, bool]) -> float:
        tokens, score, _ = hypothesis
        return score / ((5 + len(tokens)) / 6) ** alpha

    beam = [((), 0.0, False)]
    for _ in range(max_len):
        candidates = []
        for tokens, score, finished in beam:
            if finished:
                candidates.append((tokens, score, True))
                continue
            for token, p in enumerate(table.get(tokens, FALLBACK)):
                if p > 0:
                    candidates.append(((*tokens, token), score + math.log(p), token == E))
        beam = sorted(candidates, key=key, reverse=True)[:beam_size]
        if all(finished for _, _, finished in beam):
            break
    ranked = sorted(beam, key=key, reverse=True)
    return [([t for t in tokens if t != E], score) for tokens, score, _ in ranked]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    beam_size=st.integers(1, 4),
    max_len=st.integers(1, 6),
    alpha=st.sampled_from([0.0, 0.6, 2.0]),
)
def test_beam_equals_a_plain_python_reference(seed, beam_size, max_len, alpha):
    model = ScriptedModel([RandomTable(seed)])
    expected = reference_beam(RandomTable(seed), beam_size, max_len, alpha)
    count = min(beam_size, len(expected))
    result = beam_search(
        model,
        scripted_source(0),
        beam_size=beam_size,
        max_len=max_len,
        length_penalty=alpha,
        num_return=count,
    )
    assert result.tokens == [tokens for tokens, _ in expected[:count]]
    assert result.scores == pytest.approx([score for _, score in expected[:count]], abs=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 3.0])
def test_a_wide_enough_beam_is_exhaustive(alpha):
    # Up to max_len=3 over {E, a, b} there are 7 finished and 8 cut-off sequences; 16 slots
    # hold them all, so the beam's best must be the best of a brute-force enumeration.
    max_len = 3
    for seed in range(5):
        table = RandomTable(seed)
        best_key, best = -math.inf, None
        for length in range(1, max_len + 1):
            for sequence in itertools.product((E, A, B_), repeat=length):
                if E in sequence[:-1] or (sequence[-1] != E and length < max_len):
                    continue
                score = sum(
                    math.log(table.get(sequence[:t], FALLBACK)[token])
                    for t, token in enumerate(sequence)
                )
                if score / ((5 + length) / 6) ** alpha > best_key:
                    best_key, best = score / ((5 + length) / 6) ** alpha, (sequence, score)
        assert best is not None
        result = beam_search(
            ScriptedModel([table]),
            scripted_source(0),
            beam_size=16,
            max_len=max_len,
            length_penalty=alpha,
        )
        assert result.tokens == [[t for t in best[0] if t != E]]
        assert result.scores == pytest.approx([best[1]], abs=1e-12)
        assert result.normalized_scores == pytest.approx([best_key], abs=1e-12)


class TinyGRU(nn.Module):
    """A random attentional GRU decoder, float64 so batched and single runs agree closely."""

    def __init__(self, vocab_size: int, hidden: int, seed: int):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab_size, hidden).double()
        self.cell = nn.GRUCell(hidden, hidden).double()
        self.out = nn.Linear(hidden, vocab_size).double()
        for parameter in self.parameters():
            parameter.data = torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
        self.out.bias.data[2] += 1.0  # EOS likely enough that some hypotheses end early

    def start(self, source: torch.Tensor) -> dict[str, torch.Tensor]:
        memory = self.embed(source)  # (B, S, D)
        return {"hidden": memory.mean(dim=1).tanh(), "memory": memory}

    def step(
        self, tokens: torch.Tensor, state: dict[str, torch.Tensor], *, need_attention: bool = True
    ) -> StepOutput:
        hidden = self.cell(self.embed(tokens), state["hidden"])  # (B, D)
        weights = (state["memory"] @ hidden.unsqueeze(-1)).squeeze(-1).softmax(-1)  # (B, S)
        context = (weights.unsqueeze(1) @ state["memory"]).squeeze(1)  # (B, D)
        log_probs = self.out(hidden + context).log_softmax(-1)  # (B, V)
        return StepOutput(log_probs, {**state, "hidden": hidden}, weights)


devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", devices)
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    batch_size=st.integers(1, 4),
    source_len=st.integers(1, 5),
    vocab_size=st.integers(5, 9),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
)
def test_beam_one_equals_greedy_on_random_model(
    device, seed, batch_size, source_len, vocab_size, alpha
):
    model = TinyGRU(vocab_size, 6, seed).to(device)
    generator = torch.Generator().manual_seed(seed + 1)
    source = torch.randint(3, vocab_size, (batch_size, source_len), generator=generator)
    source = source.to(device)
    greedy = greedy_search(model, source, max_len=7, need_attention=True)
    beam = beam_search(
        model, source, beam_size=1, max_len=7, length_penalty=alpha, need_attention=True
    )
    assert beam.tokens == greedy.tokens
    assert beam.scores == greedy.scores
    assert beam.finished == greedy.finished
    assert beam.attention is not None and greedy.attention is not None
    for ours, theirs in zip(beam.attention, greedy.attention, strict=True):
        assert ours.device.type == device
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("device", devices)
@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    batch_size=st.integers(2, 4),
    beam_size=st.integers(2, 4),
    alpha=st.sampled_from([0.0, 1.0]),
)
def test_batched_equals_one_by_one_on_random_model(device, seed, batch_size, beam_size, alpha):
    model = TinyGRU(7, 6, seed).to(device)
    generator = torch.Generator().manual_seed(seed + 1)
    source = torch.randint(3, 7, (batch_size, 4), generator=generator).to(device)
    options = dict(beam_size=beam_size, max_len=6, length_penalty=alpha, num_return=2)
    batched = beam_search(model, source, need_attention=True, **options)
    greedy = greedy_search(model, source, max_len=6)
    for index in range(batch_size):
        alone = beam_search(model, source[index : index + 1], need_attention=True, **options)
        mine = of_source(batched, index)
        assert mine.tokens == alone.tokens
        assert mine.scores == pytest.approx(alone.scores, abs=1e-9)
        assert mine.attention is not None and alone.attention is not None
        for ours, theirs in zip(mine.attention, alone.attention, strict=True):
            assert torch.allclose(ours, theirs, atol=1e-9)
        single = greedy_search(model, source[index : index + 1], max_len=6)
        assert greedy.tokens[index] == single.tokens[0]
        assert greedy.scores[index] == pytest.approx(single.scores[0], abs=1e-9)
        # With no length penalty the beam's best never scores below greedy's hypothesis.
        if alpha == 0.0:
            assert mine.scores[0] >= greedy.scores[index] - 1e-9


class CountingModel(ScriptedModel):
    """The scripted model, counting its steps."""

    steps = 0

    def step(self, tokens, state, *, need_attention=True):
        self.steps += 1
        return super().step(tokens, state, need_attention=need_attention)


def test_without_length_penalty_a_source_stops_once_its_best_hypotheses_ended():
    # SHORT_OR_LONG at alpha=0: EOS at once (0.5) is best after step 1, and nothing alive
    # can catch up, so one step suffices where waiting for both slots to end takes three.
    model = CountingModel(TABLES)
    result = beam_search(model, scripted_source(1), beam_size=2, max_len=6, length_penalty=0.0)
    assert result.tokens == [[]] and result.scores == pytest.approx([log(0.5)])
    assert model.steps == 1
    model.steps = 0
    two = beam_search(
        model, scripted_source(1), beam_size=2, max_len=6, length_penalty=0.0, num_return=2
    )
    assert two.tokens == [[], [A, A]] and model.steps == 3  # the second best had to end too


def test_stop_early_with_a_length_penalty_is_the_documented_heuristic():
    # alpha=2 prefers "a a" E, but after step 1 the best-ranked slot has ended: stop_early
    # settles for it (one step); without it the search runs on and finds the longer one.
    model = CountingModel(TABLES)
    options = dict(beam_size=2, max_len=6, length_penalty=2.0)
    early = beam_search(model, scripted_source(1), stop_early=True, **options)
    assert early.tokens == [[]] and model.steps == 1
    assert beam_search(model, scripted_source(1), **options).tokens == [[A, A]]


@settings(max_examples=20, deadline=None)
@given(seeds=st.lists(st.integers(0, 100_000), min_size=2, max_size=4), beam_size=st.integers(2, 3))
def test_a_stopped_source_is_frozen_whatever_else_is_in_the_batch(seeds, beam_size):
    model = ScriptedModel([RandomTable(seed) for seed in seeds])
    options = dict(beam_size=beam_size, max_len=7, length_penalty=2.0, stop_early=True)
    batched = beam_search(model, scripted_source(*range(len(seeds))), **options)
    for index in range(len(seeds)):
        alone = beam_search(model, scripted_source(index), **options)
        assert of_source(batched, index).tokens == alone.tokens
        assert of_source(batched, index).scores == pytest.approx(alone.scores)


def test_a_stopped_source_does_not_run_on_beside_a_longer_one():
    # SHORT_OR_LONG stops after one step with stop_early (see above); LOCAL_TRAP beside it
    # runs three steps, during which the stopped source's live slot must not grow into the
    # "a a" E that alpha=2 would prefer.
    options = dict(beam_size=2, max_len=6, length_penalty=2.0, stop_early=True)
    batched = beam_search(MODEL, scripted_source(1, 0), **options)
    assert of_source(batched, 0).tokens == [[]]
    assert of_source(batched, 1).tokens == beam_search(MODEL, scripted_source(0), **options).tokens
