"""MultiHeadAttention(positions=...): the AttentionPositions hook, with tiny fake components."""

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from qkv.errors import InputError
from qkv.functional import causal_mask
from qkv.layers import KVCache, MultiHeadAttention


class RotateOnly:
    """Rotates each pair of channels by an angle proportional to the position (a toy RoPE)."""

    def rotate(self, x: Tensor, *, start: int) -> Tensor:
        positions = torch.arange(start, start + x.shape[2], dtype=x.dtype, device=x.device)
        angle = 0.3 * positions[:, None]  # (T, 1)
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = even * angle.cos() - odd * angle.sin()
        out[..., 1::2] = even * angle.sin() + odd * angle.cos()
        return out

    def bias(self, *, query_start, num_queries, num_keys, device, dtype):
        return None


class BiasOnly:
    """A per-head linear distance penalty (a toy ALiBi), (H, Tq, Tk)."""

    def __init__(self, num_heads: int):
        self.slopes = torch.linspace(0.2, 1.0, num_heads)

    def rotate(self, x: Tensor, *, start: int) -> Tensor:
        return x

    def bias(self, *, query_start, num_queries, num_keys, device, dtype):
        rows = torch.arange(query_start, query_start + num_queries, device=device)[:, None]
        cols = torch.arange(num_keys, device=device)[None, :]
        distance = (rows - cols).abs().to(dtype)  # (Tq, Tk)
        return -self.slopes.to(device, dtype)[:, None, None] * distance  # (H, Tq, Tk)


def _layers(positions, num_kv_heads=None, seed=0):
    torch.manual_seed(seed)
    plain = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads)
    with_positions = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads, positions=positions)
    with_positions.load_state_dict(plain.state_dict())
    return plain, with_positions


@pytest.mark.parametrize("causal", [False, True])
def test_bias_only_equals_the_bias_passed_as_a_float_mask(causal):
    positions = BiasOnly(4)
    plain, ours = _layers(positions)
    x = torch.randn(2, 6, 16)
    bias = positions.bias(query_start=0, num_queries=6, num_keys=6, device=x.device, dtype=x.dtype)
    want, _ = plain(x, mask=bias, causal=causal)
    got, _ = ours(x, causal=causal)
    assert torch.allclose(got, want, atol=1e-6)


def test_bias_combines_with_a_boolean_mask_and_causal():
    positions = BiasOnly(4)
    plain, ours = _layers(positions)
    x = torch.randn(2, 5, 16)
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    keep[1, ..., -2:] = False  # padding in the second sequence
    bias = positions.bias(query_start=0, num_queries=5, num_keys=5, device="cpu", dtype=x.dtype)
    blocked = bias.masked_fill(~(keep & causal_mask(5)), float("-inf"))  # (B, H, Tq, Tk)
    want, want_weights = plain(x, mask=blocked, need_weights=True)
    got, weights = ours(x, mask=keep, causal=True, need_weights=True)
    assert torch.allclose(got, want, atol=1e-6)
    assert torch.allclose(weights, want_weights, atol=1e-6)
    assert torch.all(weights[1, ..., -2:] == 0) and torch.all(weights.triu(1) == 0)


def test_rotate_only_rotates_queries_and_keys_not_values():
    plain, ours = _layers(RotateOnly())
    x = torch.randn(1, 4, 16)
    with_rotation, weights = ours(x, need_weights=True)
    without, plain_weights = plain(x, need_weights=True)
    assert not torch.allclose(weights, plain_weights, atol=1e-3)  # the scores changed
    # a lone token sits at position 0, where the rotation is the identity
    one = x[:, :1]
    assert torch.allclose(ours(one)[0], plain(one)[0], atol=1e-6)
    assert with_rotation.shape == without.shape


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("make", [RotateOnly, lambda: BiasOnly(4)], ids=["rotate", "bias"])
def test_cached_decoding_equals_the_full_pass(make, num_kv_heads):
    _, layer = _layers(make(), num_kv_heads=num_kv_heads)
    x = torch.randn(2, 7, 16)
    full, _ = layer(x, causal=True)
    cache = KVCache()
    steps = [layer(x[:, :3], causal=True, cache=cache)[0]]  # a prompt of 3, then one at a time
    steps += [layer(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(3, 7)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    assert cache.key.shape == (2, num_kv_heads, 7, 4)  # the cache holds only the KV heads


def test_grouped_kv_heads_are_rotated_before_they_are_repeated():
    _, layer = _layers(RotateOnly(), num_kv_heads=1)
    cache = KVCache()
    x = torch.randn(1, 3, 16)
    layer(x, causal=True, cache=cache)
    _, (w_k, b_k), _ = layer.projections()
    k = F.linear(x, w_k, b_k).view(1, 3, 1, 4).transpose(1, 2)
    assert torch.allclose(cache.key, RotateOnly().rotate(k, start=0), atol=1e-6)


def test_cross_attention_with_positions_is_an_input_error():
    _, layer = _layers(BiasOnly(4))
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 5, 16)
    with pytest.raises(InputError, match="self-attention only"):
        layer(x, memory, memory)
    with pytest.raises(InputError, match="self-attention only"):
        layer(x, cache=layer.project_kv(memory))


def test_positions_must_implement_the_protocol():
    with pytest.raises(InputError, match="AttentionPositions"):
        MultiHeadAttention(16, 4, positions=object())


def test_a_bias_of_the_wrong_shape_is_named():
    class WrongBias(BiasOnly):
        def bias(self, **kwargs):
            return torch.zeros(2, 2)

    _, layer = _layers(WrongBias(4))
    with pytest.raises(InputError, match=r"\(H, Tq, Tk\)"):
        layer(torch.randn(1, 3, 16))
