"""MultiHeadAttention against torch.nn.MultiheadAttention, grouped KV heads, the KV cache."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from qkv.functional import causal_mask, from_key_padding_mask
from qkv.layers import KVCache, MultiHeadAttention


def _pair(batch_first: bool, kdim=None, vdim=None, seed=0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(16, 4, batch_first=batch_first, kdim=kdim, vdim=vdim)
    return ref, MultiHeadAttention.from_torch(ref)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", ["self", "cross", "causal"])
def test_matches_torch_module_outputs_and_input_gradients(batch_first, kind):
    cross = kind == "cross"
    ref, ours = _pair(batch_first, kdim=12 if cross else None, vdim=10 if cross else None)
    q = torch.randn(3, 5, 16)
    k = torch.randn(3, 7, 12) if cross else q
    v = torch.randn(3, 7, 10) if cross else q
    key_padding = torch.zeros(3, k.shape[1], dtype=torch.bool)
    key_padding[1, -2:] = True  # PyTorch: True = ignore
    key_padding[2, -1] = True
    tq, tk = q.shape[1], k.shape[1]
    torch_mask = ~causal_mask(tq, tk) if kind == "causal" else None  # PyTorch: True = blocked

    def run_torch(q, k, v):
        t = (lambda x: x) if batch_first else (lambda x: x.transpose(0, 1))
        out, _ = ref(
            t(q), t(k), t(v), key_padding_mask=key_padding, attn_mask=torch_mask, need_weights=False
        )
        return t(out)

    def run_ours(q, k, v):
        keep = from_key_padding_mask(key_padding)  # converted once: True = may attend
        out, _ = ours(
            q, k if cross else None, v if cross else None, mask=keep, causal=kind == "causal"
        )
        return out

    results = []
    for fn in (run_torch, run_ours):
        if cross:
            inputs = [x.clone().requires_grad_(True) for x in (q, k, v)]
        else:  # one tensor is query, key and value, so its gradient gathers all three paths
            inputs = [q.clone().requires_grad_(True)] * 3
        out = fn(*inputs)
        out.backward(torch.ones_like(out))
        results.append((out.detach(), [x.grad for x in inputs if x.grad is not None]))
    (want, want_grads), (got, got_grads) = results
    assert torch.allclose(got, want, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-5)


def test_weights_match_torch_per_head_and_carry_no_gradient():
    ref, ours = _pair(True)
    x = torch.randn(2, 5, 16, requires_grad=True)
    _, want = ref(x, x, x, need_weights=True, average_attn_weights=False)
    out, got = ours(x, need_weights=True)
    assert got.shape == (2, 4, 5, 5)
    assert torch.allclose(got, want, atol=1e-6)
    assert not got.requires_grad and out.requires_grad


@given(seed=st.integers(0, 1000), num_kv_heads=st.sampled_from([1, 2, 4]), length=st.integers(1, 6))
def test_grouped_query_attention_equals_full_heads_with_duplicated_kv_weights(
    seed, num_kv_heads, length
):
    """Query head h reads key/value head h // (H / Hkv): a grouped layer is a full layer
    whose key/value projections repeat each KV head's rows for its group of query heads."""
    torch.manual_seed(seed)
    grouped = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads)
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = grouped.projections()
    assert w_k.shape == w_v.shape == (num_kv_heads * 4, 16)
    full = MultiHeadAttention(16, 4)

    def repeat(rows):  # (Hkv * Dh, ...) -> (H * Dh, ...), each head repeated for its group
        return rows.view(num_kv_heads, 4, -1).repeat_interleave(4 // num_kv_heads, 0).flatten(0, 1)

    state = grouped.state_dict()
    state["in_proj_weight"] = torch.cat([w_q, repeat(w_k), repeat(w_v)])
    state["in_proj_bias"] = torch.cat([b_q, repeat(b_k[:, None])[:, 0], repeat(b_v[:, None])[:, 0]])
    full.load_state_dict(state)
    x = torch.randn(2, length, 16)
    torch.testing.assert_close(grouped(x, causal=True)[0], full(x, causal=True)[0])


@given(
    seed=st.integers(0, 1000),
    num_kv_heads=st.sampled_from([1, 2]),
    steps=st.lists(st.integers(1, 3), min_size=1, max_size=4),
)
def test_kv_cache_step_by_step_equals_full_sequence(seed, num_kv_heads, steps):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(8, 2, num_kv_heads=num_kv_heads).eval()
    total = sum(steps)
    x = torch.randn(2, total, 8)
    full, _ = layer(x, causal=True)
    cache, pieces, start = KVCache(), [], 0
    for n in steps:  # append one or several positions at a time
        out, _ = layer(x[:, start : start + n], causal=True, cache=cache)
        pieces.append(out)
        start += n
    assert cache.length == total
    assert torch.allclose(torch.cat(pieces, 1), full, atol=1e-5)


def test_cache_grows_past_its_first_capacity_and_selects_rows():
    cache = KVCache()
    for t in range(40):
        key = torch.full((3, 1, 1, 2), float(t))
        cache.append(key, key + 100)
    assert cache.key.shape == (3, 1, 40, 2)
    assert cache.key[0, 0, :, 0].tolist() == [float(t) for t in range(40)]
    picked = cache.select(torch.tensor([2, 2, 0]))
    assert picked.length == 40 and picked.value.shape == (3, 1, 40, 2)
    assert torch.equal(picked.value[0], cache.value[2])


def test_cross_attention_with_static_kv_equals_passing_memory():
    torch.manual_seed(4)
    layer = MultiHeadAttention(8, 2, kdim=6, vdim=6).eval()
    memory, q = torch.randn(2, 5, 6), torch.randn(2, 3, 8)
    direct, _ = layer(q, memory, memory)
    static = layer.project_kv(memory)
    cached, _ = layer(q, cache=static)
    assert torch.allclose(direct, cached, atol=1e-6)


def test_layer_errors_name_the_problem():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads=4 is not divisible by num_kv_heads=3"):
        MultiHeadAttention(8, 4, num_kv_heads=3)
    layer = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query must be \(B, Tq, 8\)"):
        layer(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"key must be \(B, Tk, 8\)"):
        layer(torch.randn(2, 3, 8), torch.randn(2, 3, 5), torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer(torch.randn(2, 3, 8), mask=torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="self-attention .* needs kdim = vdim = d_model = 8"):
        MultiHeadAttention(8, 2, kdim=6, vdim=6)(torch.randn(2, 3, 8))


def test_both_cache_kinds_share_one_protocol_and_other_objects_are_refused():
    from qkv.layers import AttentionCache, StaticKV

    layer = MultiHeadAttention(16, 4, num_kv_heads=2)
    memory, x = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    static = layer.project_kv(memory)
    growing = KVCache()
    for cache, appends in ((static, False), (growing, True)):
        assert isinstance(cache, AttentionCache) and cache.appends is appends
    assert isinstance(static, StaticKV) and static.length == 5
    cross, _ = layer(x, cache=static)
    torch.testing.assert_close(cross, layer(x, memory, memory)[0])
    layer(x, cache=growing)
    assert growing.length == 3
    with pytest.raises(TypeError, match="KVCache or StaticKV"):
        layer(x, cache=(static.key, static.value))
    with pytest.raises(ValueError, match="omit key and value"):
        layer(x, memory, memory, cache=static)


def test_state_dict_is_nn_multihead_attentions():
    """Self-attention layers stack W_Q, W_K, W_V as PyTorch does: the state dicts have the
    same names and shapes, and one loads into the other."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention(16, 4).eval()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in ref.state_dict().items()
    }
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(x)[0], ref(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize("bias", [True, False])
def test_checkpoints_with_three_separate_projections_still_load(bias):
    """Before the projections were stacked, a layer saved q_proj, k_proj and v_proj Linears;
    such a state dict loads into the stacked layer and computes the same attention."""
    torch.manual_seed(1)
    q, k, v, out = (nn.Linear(16, w, bias=bias) for w in (16, 8, 8, 16))
    old = {
        f"{name}.{kind}": getattr(linear, kind)
        for name, linear in (("q_proj", q), ("k_proj", k), ("v_proj", v), ("out_proj", out))
        for kind in ("weight", "bias")
        if getattr(linear, kind) is not None
    }
    layer = MultiHeadAttention(16, 4, num_kv_heads=2, bias=bias).eval()
    layer.load_state_dict(old)
    x = torch.randn(2, 5, 16)

    def heads(t, n):
        return t.view(2, 5, n, 4).transpose(1, 2)

    keys = heads(k(x), 2).repeat_interleave(2, 1)
    values = heads(v(x), 2).repeat_interleave(2, 1)
    weights = (heads(q(x), 4) @ keys.transpose(-2, -1) / 2.0).softmax(-1)
    expected = out((weights @ values).transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(layer(x)[0], expected)
