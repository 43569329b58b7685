"""Generation with a sliding window keeps a rolling KV cache of the last W - 1 positions."""

import pytest
import torch
import torch.nn.functional as F

from qkv.decoding import sample
from qkv.errors import InputError
from qkv.layers import KVCache, RollingKVCache
from qkv.models.lm_config import LM_POSITION_KINDS

from .test_lm import random_ids, tiny_lm


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_rolling_cache_steps_equal_full_recomputation_well_past_the_window(positions):
    window, length = 4, 60  # 15 windows generated
    model = tiny_lm(positions, window=window)
    ids = random_ids(2, length)
    state = model.start(ids[:, :3])
    assert all(isinstance(cache, RollingKVCache) for cache in state.caches)
    for t in range(3, length):
        output = model.step(ids[:, t], state)
        # full recomputation of the prefix under the window mask, nothing cached
        full = F.log_softmax(model(ids[:, : t + 1]).logits[:, -1], dim=-1)
        torch.testing.assert_close(output.log_probs, full, rtol=1e-5, atol=1e-5)
        state = output.state
        for cache in state.caches:
            assert cache.key.shape[2] == cache.value.shape[2] == min(window - 1, t + 1)
            assert cache.length == t + 1 and cache.first == t + 1 - cache.key.shape[2]


def test_a_long_prompt_leaves_only_the_window_in_the_cache():
    model = tiny_lm("rope", window=5)
    ids = random_ids(1, 40)
    state = model.start(ids[:, :30])
    assert [cache.key.shape[2] for cache in state.caches] == [4, 4]
    output = model.step(ids[:, 30], state)
    full = F.log_softmax(model(ids[:, :31]).logits[:, -1], dim=-1)
    torch.testing.assert_close(output.log_probs, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_sampling_with_the_rolling_cache_equals_sampling_without_a_cache(positions):
    model = tiny_lm(positions, window=3)
    prompt = random_ids(2, 5)
    cached = sample(model, prompt, max_new_tokens=30, seed=7)
    uncached = sample(model, prompt, max_new_tokens=30, seed=7, use_cache=False)
    assert torch.equal(cached, uncached)


def test_select_reorders_the_rolling_cache_and_keeps_its_positions():
    cache = RollingKVCache(3)
    keys = torch.arange(2 * 5.0).reshape(2, 1, 5, 1)
    cache.append(keys, -keys)
    picked = cache.select(torch.tensor([1, 1, 0]))
    assert picked.length == 5 and picked.first == 3
    torch.testing.assert_close(picked.key[:, 0, :, 0], torch.tensor([[8.0, 9], [8, 9], [3, 4]]))
    torch.testing.assert_close(picked.value, -picked.key)


def test_the_rolling_cache_returns_held_and_new_keys_and_refuses_other_shapes():
    cache = RollingKVCache(2)
    keys, values = cache.append(torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    assert keys.shape[2] == values.shape[2] == 3 and cache.key.shape[2] == 1
    keys, _ = cache.append(torch.zeros(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    assert keys.shape[2] == 2 and cache.length == 4 and cache.first == 3
    with pytest.raises(InputError, match="cannot append"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    assert cache.length == 4  # nothing consumed by the refused call
    with pytest.raises(InputError, match="window=0"):
        RollingKVCache(0)


def test_a_full_causal_lm_keeps_the_growing_cache():
    state = tiny_lm("rope").start(random_ids(1, 4))
    assert all(type(cache) is KVCache and cache.first == 0 for cache in state.caches)
