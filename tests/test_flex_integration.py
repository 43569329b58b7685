"""The rest of qkv on the flex path: qkv.attention, explain_backend, MultiHeadAttention
(block_mask / score_mod passed through; ALiBi joining as a score function)."""

import pytest
import torch

import qkv
from qkv.errors import QkvError
from qkv.functional import alibi_bias, alibi_slopes, create_block_mask
from qkv.functional import patterns as P
from qkv.layers import ALiBi, MultiHeadAttention


def _qkv(tq=20, tk=20, heads=4, kv_heads=4):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, tq, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(2, kv_heads, tk, 8, generator=gen, dtype=torch.float64)
    return q, k, torch.randn(2, kv_heads, tk, 8, generator=gen, dtype=torch.float64)


def _window_dense(t, w):
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (i - j >= 0) & (i - j < w)


def test_attention_with_a_block_mask_equals_the_dense_mask():
    q, k, v = _qkv(heads=4, kv_heads=2)
    block_mask = create_block_mask(P.sliding_window(5), None, None, 20, 20, BLOCK_SIZE=8)
    got = qkv.attention(q, k, v, block_mask=block_mask).output
    want = qkv.attention(q, k, v, mask=_window_dense(20, 5), backend="reference").output
    torch.testing.assert_close(got, want)
    assert qkv.explain_backend(q, k, v, block_mask=block_mask).backend == "flex"


def test_attention_causal_with_a_score_function_is_end_aligned():
    q, k, v = _qkv(tq=6, tk=20)
    slopes = alibi_slopes(4, dtype=torch.float64)
    got = qkv.attention(q, k, v, causal=True, score_mod=P.alibi(slopes, query_start=14)).output
    bias = alibi_bias(4, 6, 20, slopes=slopes)
    want = qkv.attention(q, k, v, mask=bias, causal=True, backend="reference").output
    torch.testing.assert_close(got, want)


def test_flex_path_refuses_what_it_cannot_combine():
    q, k, v = _qkv()
    block_mask = create_block_mask(P.causal, None, None, 20, 20)
    for kwargs in (
        {"mask": torch.ones(20, 20, dtype=torch.bool)},
        {"dropout": 0.1},
        {"need_weights": True},
        {"causal": True},
        {"backend": "sdpa"},
    ):
        with pytest.raises(QkvError, match="flex kernel"):
            qkv.attention(q, k, v, block_mask=block_mask, **kwargs)


def test_multihead_passes_block_mask_and_score_mod_through():
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, num_kv_heads=2).double()
    x = torch.randn(2, 20, 32, dtype=torch.float64, requires_grad=True)
    block_mask = create_block_mask(P.sliding_window(6), None, None, 20, 20, BLOCK_SIZE=8)
    got, _ = layer(x, block_mask=block_mask, score_mod=P.softcap(2.0))
    q, k, v = layer.project_self(x)
    scores = torch.tanh(q @ k.repeat_interleave(2, 1).transpose(-2, -1) / 8**0.5 / 2.0) * 2.0
    weights = torch.softmax(scores.masked_fill(~_window_dense(20, 6), float("-inf")), -1)
    want = layer.out_proj(qkv.merge_heads(weights @ v.repeat_interleave(2, 1)))
    torch.testing.assert_close(got, want)
    grad_got = torch.autograd.grad(got.sum(), layer.in_proj_weight)[0]
    grad_want = torch.autograd.grad(want.sum(), layer.in_proj_weight)[0]
    torch.testing.assert_close(grad_got, grad_want)


def test_alibi_layer_as_a_score_function_equals_its_dense_bias():
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, positions=ALiBi(4)).double()
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    causal_blocks = create_block_mask(P.causal, None, None, 20, 20, BLOCK_SIZE=8)
    got, _ = layer(x, block_mask=causal_blocks)
    want, _ = layer(x, causal=True)
    torch.testing.assert_close(got, want)
    cache = qkv.KVCache()
    layer(x[:, :19], causal=True, cache=cache)  # the first 19 positions cached
    step_blocks = create_block_mask(qkv.noop_mask, None, None, 1, 20)
    last, _ = layer(x[:, 19:], cache=cache, block_mask=step_blocks)
    torch.testing.assert_close(last, want[:, 19:])
