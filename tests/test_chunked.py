"""The "chunked" backend: blockwise exact attention equals the reference, in values and
gradients, with every kind of mask, and never NaN."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.functional import available_backends, chunked_attention, weights_from_lse
from qkv.functional.backends import chunked_kernel
from qkv.functional.backends.chunked_kernel import ChunkedAttentionFunction

TOLERANCE = {torch.float64: 1e-10, torch.float32: 2e-5}


def reference(query, key, value, mask=None, causal=False, scale=None):
    return qkv.attention(
        query, key, value, mask=mask, causal=causal, scale=scale, backend="reference"
    ).output


def masked_scores(query, key, mask, causal, scale):
    """scale * q.k with masked keys at -inf (the definition lse must match).  (B, H, Tq, Tk)"""
    scores = query @ key.transpose(-2, -1) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    if causal:
        scores = scores.masked_fill(~qkv.causal_mask(query.shape[2], key.shape[2]), float("-inf"))
    return scores


class Case(NamedTuple):
    batch: int
    heads: int
    query_len: int
    key_len: int
    head_dim: int
    value_dim: int
    causal: bool
    dtype: torch.dtype
    kind: str  # "none", "bool" or "bias"
    mask_shape: tuple[int, ...]
    block_size: int
    seed: int


@st.composite
def attention_cases(draw) -> Case:
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    query_len, key_len = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    causal = draw(st.booleans())
    if causal and key_len < query_len:
        query_len, key_len = key_len, query_len
    shapes = [(batch, heads, query_len, key_len), (batch, 1, 1, key_len), (query_len, key_len)]
    return Case(
        batch,
        heads,
        query_len,
        key_len,
        head_dim=draw(st.integers(1, 6)),
        value_dim=draw(st.integers(1, 6)),
        causal=causal,
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        kind=draw(st.sampled_from(["none", "bool", "bias"])),
        mask_shape=draw(st.sampled_from([*shapes, (heads, 1, key_len)])),
        block_size=draw(st.integers(1, 5)),  # several blocks of rows and keys
        seed=draw(st.integers(0, 2**16)),
    )


def make_mask(kind, shape, dtype, generator):
    if kind == "none":
        return None
    keep = torch.rand(shape, generator=generator) < 0.7
    if shape[-2] > 1:
        keep[..., 0, :] = False  # a query row with no key at all
    if kind == "bool":
        return keep
    bias = torch.randn(shape, generator=generator, dtype=dtype)  # relative-position-like bias
    return bias.masked_fill(~keep, float("-inf")).requires_grad_()


@settings(max_examples=30, deadline=None)
@given(attention_cases())
def test_equals_reference_in_values_and_gradients(case):
    generator = torch.Generator().manual_seed(case.seed)

    def tensor(length, width):
        shape = (case.batch, case.heads, length, width)
        return torch.randn(*shape, generator=generator, dtype=case.dtype, requires_grad=True)

    query = tensor(case.query_len, case.head_dim)
    key, value = tensor(case.key_len, case.head_dim), tensor(case.key_len, case.value_dim)
    mask = make_mask(case.kind, case.mask_shape, case.dtype, generator)
    grad_output = torch.randn(
        query.shape[:3] + (case.value_dim,), generator=generator, dtype=case.dtype
    )
    inputs = [query, key, value] + ([mask] if case.kind == "bias" else [])
    causal, block_size, dtype = case.causal, case.block_size, case.dtype

    ours = chunked_attention(query, key, value, mask=mask, causal=causal, block_size=block_size)
    theirs = reference(query, key, value, mask, causal)
    torch.testing.assert_close(ours, theirs, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])
    our_grads = torch.autograd.grad(ours, inputs, grad_output)
    their_grads = torch.autograd.grad(theirs, inputs, grad_output)
    for name, g_ours, g_theirs in zip(("query", "key", "value", "bias"), our_grads, their_grads):
        assert torch.isfinite(g_ours).all(), name
        torch.testing.assert_close(
            g_ours, g_theirs, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype], msg=name
        )


def test_backend_chunked_serves_attention_with_grouped_heads_and_causal_tq_lt_tk():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 5, 8, generator=generator)
    key, value = (
        torch.randn(2, 2, 9, 8, generator=generator),
        torch.randn(2, 2, 9, 3, generator=generator),
    )
    padding = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])[:, None, None, :]
    ours = qkv.attention(query, key, value, mask=padding, causal=True, backend="chunked").output
    torch.testing.assert_close(ours, reference(query, key, value, padding, causal=True))


def test_bfloat16_accumulates_in_float32():
    generator = torch.Generator().manual_seed(1)
    query, key, value = (
        torch.randn(1, 2, 40, 16, generator=generator).bfloat16() for _ in range(3)
    )
    bias = torch.randn(2, 40, 40, generator=generator).bfloat16()
    output, lse = chunked_attention(
        query, key, value, mask=bias, causal=True, block_size=16, return_lse=True
    )
    assert output.dtype == torch.bfloat16 and lse.dtype == torch.float32
    exact = reference(query.float(), key.float(), value.float(), bias.float(), causal=True)
    torch.testing.assert_close(output.float(), exact, atol=2e-2, rtol=2e-2)


def test_gradcheck_float64_through_the_function():
    generator = torch.Generator().manual_seed(2)

    def tensor(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)

    query, key, value, bias = (
        tensor(1, 2, 5, 3),
        tensor(1, 2, 6, 3),
        tensor(1, 2, 6, 2),
        tensor(2, 5, 6),
    )
    # causal, Tq < Tk, blocks of 2: skipped, diagonal and full blocks; lse's gradient too.
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: ChunkedAttentionFunction.apply(q, k, v, b, True, 0.7, 2),
        (query, key, value, bias),
    )
    keep = torch.rand(1, 1, 5, 6, generator=generator) < 0.6
    keep[..., 0] = True
    assert torch.autograd.gradcheck(
        lambda q, k, v: ChunkedAttentionFunction.apply(q, k, v, keep, False, 0.5, 4),
        (query, key, value),
    )


def test_lse_is_logsumexp_of_masked_scores_and_differentiable():
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(2, 3, 6, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    key = torch.randn(2, 3, 10, 4, generator=generator, dtype=torch.float64)
    value = torch.randn(2, 3, 10, 4, generator=generator, dtype=torch.float64)
    keep = torch.rand(2, 1, 6, 10, generator=generator) < 0.5
    keep[:, :, 2] = False
    _, lse = chunked_attention(
        query, key, value, mask=keep, causal=True, scale=0.3, block_size=4, return_lse=True
    )
    expected = torch.logsumexp(masked_scores(query, key, keep, True, 0.3), dim=-1)
    torch.testing.assert_close(lse, expected)
    assert (lse[:, :, 2] == float("-inf")).all()
    finite = torch.isfinite(expected)
    (ours,) = torch.autograd.grad(lse[finite].sum(), query)
    (theirs,) = torch.autograd.grad(expected[finite].sum(), query)
    torch.testing.assert_close(ours, theirs)


def test_weights_from_lse_equal_reference_weights_for_chosen_rows_and_heads():
    generator = torch.Generator().manual_seed(4)
    query, key, value = (torch.randn(2, 4, 7, 5, generator=generator) for _ in range(3))
    bias = torch.randn(4, 7, 7, generator=generator)
    bias[1, 3] = float("-inf")  # head 1, row 3: no key
    _, lse = chunked_attention(
        query, key, value, mask=bias, causal=True, block_size=3, return_lse=True
    )
    weights = weights_from_lse(query, key, lse, mask=bias, causal=True, rows=[3, -1], heads=[1, 2])
    full = qkv.attention(
        query, key, value, mask=bias, causal=True, need_weights=True, backend="reference"
    ).weights
    torch.testing.assert_close(weights, full[:, [1, 2]][:, :, [3, 6]])
    assert weights.shape == (2, 2, 2, 7) and (weights[:, 0, 0] == 0).all()
    everything = weights_from_lse(query, key, lse, mask=bias, causal=True)
    torch.testing.assert_close(everything, full)


@pytest.mark.parametrize("kind", ["bool", "bias"])
def test_fully_masked_rows_give_zero_output_and_zero_finite_gradients(kind):
    generator = torch.Generator().manual_seed(5)
    query, key, value = (
        torch.randn(1, 2, 6, 4, generator=generator, requires_grad=True) for _ in range(3)
    )
    keep = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    keep[..., 1, :] = False
    keep[..., 4, :] = False
    mask = keep if kind == "bool" else torch.zeros(1, 1, 6, 6).masked_fill(~keep, float("-inf"))
    output = chunked_attention(query, key, value, mask=mask, block_size=2)
    assert (output[:, :, [1, 4]] == 0).all() and torch.isfinite(output).all()
    output.sum().backward()
    for tensor in (query, key, value):
        assert torch.isfinite(tensor.grad).all()
    assert (query.grad[:, :, [1, 4]] == 0).all()


def test_head_groups_split_when_tiles_are_large(monkeypatch):
    """With a tiny tile budget the kernel splits batches and heads into many groups."""
    monkeypatch.setattr(chunked_kernel, "TILE_ELEMENTS", 8)
    generator = torch.Generator().manual_seed(6)
    query, key, value = (
        torch.randn(2, 3, 5, 4, generator=generator, requires_grad=True) for _ in range(3)
    )
    bias = torch.randn(2, 1, 5, 5, generator=generator, requires_grad=True)
    ours = chunked_attention(query, key, value, mask=bias, block_size=2)
    theirs = reference(query, key, value, bias)
    torch.testing.assert_close(ours, theirs)
    inputs = (query, key, value, bias)
    for g_ours, g_theirs in zip(
        torch.autograd.grad(ours.sum(), inputs), torch.autograd.grad(theirs.sum(), inputs)
    ):
        torch.testing.assert_close(g_ours, g_theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_logits_rising_block_by_block_stay_exact(dtype):
    """Each key block scores far higher than the last, so every block rescales what came
    before by a huge factor (exp(-hundreds)); the online softmax must not overflow."""
    generator = torch.Generator().manual_seed(7)
    query = torch.randn(1, 2, 6, 4, generator=generator, dtype=dtype)
    key = torch.randn(1, 2, 12, 4, generator=generator, dtype=dtype)
    key = key * torch.arange(1, 13, dtype=dtype)[:, None] * 20  # scores up to ~1000
    value = torch.randn(1, 2, 12, 3, generator=generator, dtype=dtype)
    output, lse = chunked_attention(query, key, value, block_size=4, return_lse=True)
    expected = reference(query.double(), key.double(), value.double())
    torch.testing.assert_close(output, expected.to(dtype), atol=1e-5, rtol=1e-5)
    exact_lse = torch.logsumexp(query.double() @ key.double().transpose(-2, -1) / 2, dim=-1)
    torch.testing.assert_close(lse, exact_lse.to(dtype), atol=1e-4, rtol=1e-6)


def test_unsupported_calls_name_the_reason():
    query = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="dropout not supported by the chunked kernel"):
        qkv.attention(query, query, query, dropout=0.1, backend="chunked")
    with pytest.raises(ValueError, match="need_weights: use reference, or chunked_attention"):
        qkv.attention(query, query, query, need_weights=True, backend="chunked")
    with pytest.raises(ValueError, match="block_size"):
        chunked_attention(query, query, query, block_size=0)
    with pytest.raises(ValueError, match="Tk >= Tq"):
        chunked_attention(query, query[:, :, :2], query[:, :, :2], causal=True)
    with pytest.raises(ValueError, match="lse has shape"):
        weights_from_lse(query, query, torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="rows="):
        weights_from_lse(query, query, torch.zeros(1, 1, 3), rows=[3])


def test_auto_order_puts_chunked_between_sdpa_and_reference():
    order = available_backends()
    assert order.index("sdpa") < order.index("chunked") < order.index("reference")
