"""TranslationDataset (encoding, truncation) and TokenBatchSampler (budget, epochs, ranks)."""

import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    CharTokenizer,
    Pair,
    TokenBatchSampler,
    TranslationDataset,
)

# ---------------------------------------------------------------- dataset

TOKENIZER = CharTokenizer.train(["abcdefgh xyz"])


def encode(text):
    return TOKENIZER.encode(text)


def test_dataset_encodes_once_with_bos_eos():
    pairs = [Pair("abc", "xy"), Pair("h", "zzz")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing truncated: no warning
        dataset = TranslationDataset(pairs, TOKENIZER, TOKENIZER)
    assert len(dataset) == 2
    assert dataset[0] == (encode("abc"), [BOS_ID, *encode("xy"), EOS_ID])
    assert dataset.source_lengths == [3, 1]
    assert dataset.target_lengths == [4, 5]
    assert dataset.lengths == [4, 5]
    assert dataset.pairs == pairs


def test_dataset_collate_pads_and_keeps_indices():
    dataset = TranslationDataset([Pair("abc", "xy"), Pair("h", "zzz")], TOKENIZER, TOKENIZER)
    batch = dataset.collate([1, 0])
    assert batch.index.tolist() == [1, 0]
    assert batch.source.tolist() == [encode("h") + [PAD_ID, PAD_ID], encode("abc")]
    assert batch.target.tolist() == [
        [BOS_ID, *encode("zzz"), EOS_ID],
        [BOS_ID, *encode("xy"), EOS_ID, PAD_ID],
    ]


def test_dataset_truncates_with_one_warning():
    pairs = [Pair("abcdefgh", "xyzxyz"), Pair("abc", "xy"), Pair("abcdef", "x")]
    with pytest.warns(UserWarning) as record:
        dataset = TranslationDataset(
            pairs, TOKENIZER, TOKENIZER, max_source_len=4, max_target_len=5
        )
    assert len(record) == 1
    message = str(record[0].message)
    assert "truncated 2 of 3 sources" in message and "1 targets" in message
    assert dataset[0] == (encode("abcd"), [BOS_ID, *encode("xyz"), EOS_ID])  # EOS kept
    assert dataset[1] == (encode("abc"), [BOS_ID, *encode("xy"), EOS_ID])
    assert max(dataset.source_lengths) == 4 and max(dataset.target_lengths) == 5


def test_dataset_errors():
    with pytest.raises(ValueError, match="pair 1 has an empty target"):
        TranslationDataset([Pair("a", "b"), Pair("a", "")], TOKENIZER, TOKENIZER)
    with pytest.raises(ValueError, match="pair 0 has an empty source"):
        TranslationDataset([Pair("", "b")], TOKENIZER, TOKENIZER)
    with pytest.raises(ValueError, match="max_target_len=2"):
        TranslationDataset([Pair("a", "b")], TOKENIZER, TOKENIZER, max_target_len=2)


# ---------------------------------------------------------------- sampler


def random_lengths(count, seed=0, longest=60):
    rng = random.Random(seed)
    return [rng.randint(1, longest) for _ in range(count)]


def padded_size(batch, lengths):
    return len(batch) * max(lengths[i] for i in batch)


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=300),
    max_tokens=st.integers(1, 400),
    chunk_size=st.integers(1, 100),
    epoch=st.integers(0, 3),
)
def test_budget_respected_and_every_index_once(lengths, max_tokens, chunk_size, epoch):
    sampler = TokenBatchSampler(lengths, max_tokens=max_tokens, chunk_size=chunk_size, seed=7)
    batches = sampler.batches(epoch)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert padded_size(batch, lengths) <= max_tokens or len(batch) == 1


def greedy_batches(order, lengths, max_tokens):
    """The same budget filled along an unsorted order: what bucketing is compared with."""
    batches, batch = [], []
    for i in order:
        if batch and (len(batch) + 1) * max(lengths[j] for j in [*batch, i]) > max_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    return batches + [batch]


def padding(batches, lengths):
    return sum(padded_size(b, lengths) - sum(lengths[i] for i in b) for b in batches)


def test_batches_bucket_similar_lengths():
    lengths = random_lengths(4000)
    bucketed = TokenBatchSampler(lengths, max_tokens=600).batches(0)
    unsorted = greedy_batches(random.Random(0).sample(range(4000), 4000), lengths, 600)
    assert padding(bucketed, lengths) < 0.05 * sum(lengths) < padding(unsorted, lengths)
    assert len(bucketed) < len(unsorted)
    # the batch order is shuffled: not sorted by length
    longest = [max(lengths[i] for i in batch) for batch in bucketed]
    assert longest != sorted(longest)


def test_deterministic_per_epoch_and_epochs_differ():
    lengths = random_lengths(500)
    first, second = (TokenBatchSampler(lengths, max_tokens=300, seed=3) for _ in range(2))
    assert first.batches(0) == second.batches(0)
    assert first.batches(1) != first.batches(0)
    assert first.batches(1) == second.batches(1)
    assert TokenBatchSampler(lengths, max_tokens=300, seed=4).batches(0) != second.batches(0)


def test_without_shuffle_batches_follow_sorted_order():
    lengths = [5, 1, 4, 2, 3]
    sampler = TokenBatchSampler(lengths, max_tokens=6, shuffle=False)
    assert sampler.batches(0) == [[1, 3], [4], [2], [0]]
    assert sampler.batches(1) == sampler.batches(0)


def test_long_example_gets_its_own_batch():
    sampler = TokenBatchSampler([3, 100, 3, 3], max_tokens=10, shuffle=False)
    assert sampler.batches(0) == [[0, 2, 3], [1]]


def test_world_size_two_ranks_disjoint_equal_length():
    lengths = random_lengths(777, seed=1)
    ranks = [TokenBatchSampler(lengths, max_tokens=250, rank=r, world_size=2) for r in range(2)]
    every = TokenBatchSampler(lengths, max_tokens=250)._all_batches(0)
    for epoch in range(2):
        zero, one = ranks[0].batches(epoch), ranks[1].batches(epoch)
        assert len(zero) == len(one) == len(every) // 2
        assert not {i for b in zero for i in b} & {i for b in one for i in b}
    # the two ranks deal out one shared list: rank r takes batches r, r + 2, ...
    assert ranks[0].batches(0) == every[0 : 2 * (len(every) // 2) : 2]
    assert ranks[1].batches(0) == every[1 : 2 * (len(every) // 2) : 2]


def test_sampler_errors():
    with pytest.raises(ValueError, match="rank=2"):
        TokenBatchSampler([1, 2], max_tokens=10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="max_tokens=0"):
        TokenBatchSampler([1, 2], max_tokens=0)
    with pytest.raises(ValueError, match="lengths is empty"):
        TokenBatchSampler([], max_tokens=10)
    with pytest.raises(ValueError, match="length < 1"):
        TokenBatchSampler([3, 0], max_tokens=10)
    with pytest.raises(ValueError, match="fewer than world_size=4"):
        TokenBatchSampler([1, 1], max_tokens=10, world_size=4).batches(0)
