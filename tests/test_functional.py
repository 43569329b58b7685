"""The functional core: masks, masked softmax, attention on every backend."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import qkv
from qkv.functional import (
    attention,
    attention_weights,
    available_backends,
    causal_mask,
    explain_backend,
    from_key_padding_mask,
    masked_softmax,
    merge_heads,
    padding_mask,
    split_heads,
)


def test_masked_softmax_rows_sum_to_one_and_masked_get_zero():
    scores = torch.randn(3, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    weights = masked_softmax(scores, mask)
    assert torch.allclose(weights[0].sum(), torch.tensor(1.0))
    assert torch.allclose(weights[2].sum(), torch.tensor(1.0))
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[1] == 0)  # fully masked row: zeros, not NaN
    (weights * torch.randn(3, 5)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[1] == 0)
    expected = torch.softmax(scores[0, [0, 1, 3]], -1)
    assert torch.allclose(weights[0, [0, 1, 3]], expected)


def test_masked_softmax_rejects_non_boolean_mask():
    with pytest.raises(TypeError, match="boolean"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))


def test_masks_have_documented_shapes_and_polarity():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    keep = padding_mask(tokens, pad_id=0)
    assert keep.shape == (2, 1, 1, 3)
    assert keep[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    assert torch.equal(from_key_padding_mask(tokens == 0), keep)
    assert causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]
    # Tq < Tk (decoding with a cache): aligned to the end, the last query sees every key.
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="key_len >= query_len"):
        causal_mask(4, 2)


def test_split_and_merge_heads_round_trip():
    x = torch.randn(2, 7, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 7, 4)
    assert torch.equal(heads[:, 1], x[:, :, 4:8])
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError, match="not divisible"):
        split_heads(x, 5)


def test_hand_computed_attention():
    # One query, two keys: scores q.k / sqrt(2) = [0, 1/sqrt(2)] -> weights by hand.
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]])
    v = torch.tensor([[[[10.0], [20.0]]]])
    a = math.exp(0.0)
    b = math.exp(1 / math.sqrt(2))
    expected_weights = torch.tensor([a / (a + b), b / (a + b)])
    for backend in available_backends():
        result = attention(q, k, v, backend=backend)
        assert result.output.item() == pytest.approx(
            10 * expected_weights[0] + 20 * expected_weights[1]
        )
    ref = attention(q, k, v, need_weights=True)
    assert torch.allclose(ref.weights.flatten(), expected_weights)
    dot = attention(q, k, v, score="dot", need_weights=True)  # no scale: scores [0, 1]
    assert dot.weights.flatten()[1].item() == pytest.approx(math.e / (1 + math.e))


def test_reference_matches_pytorch_sdpa():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(
        attention(q, k, v, mask=mask, backend="reference").output, expected, atol=1e-6
    )
    expected = F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], is_causal=True)
    got = attention(q, k[:, :, :5], v[:, :, :5], causal=True, backend="reference").output
    assert torch.allclose(got, expected, atol=1e-6)


def _random_call(draw_seed, batch, heads, kv_heads, tq, tk, dh, dv, mask_kind, causal, dtype):
    gen = torch.Generator().manual_seed(draw_seed)
    q = torch.randn(batch, heads, tq, dh, generator=gen, dtype=dtype)
    k = torch.randn(batch, kv_heads, tk, dh, generator=gen, dtype=dtype)
    v = torch.randn(batch, kv_heads, tk, dv, generator=gen, dtype=dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(batch, 1, tq, tk, generator=gen) > 0.4
        mask[0, 0, 0] = False  # at least one fully masked row
    elif mask_kind == "padding":
        mask = torch.rand(batch, 1, 1, tk, generator=gen) > 0.3
    elif mask_kind == "bias":
        mask = torch.randn(1, heads, tq, tk, generator=gen, dtype=dtype)
        mask[..., -1, :] = float("-inf")  # a fully blocked row via the bias
    return q, k, v, mask


@given(
    seed=st.integers(0, 2**16),
    batch=st.integers(1, 2),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2]),
    tq=st.integers(1, 9),
    extra_keys=st.integers(0, 6),
    dh=st.sampled_from([4, 8]),
    dv=st.sampled_from([4, 6]),
    mask_kind=st.sampled_from(["none", "bool", "padding", "bias"]),
    causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_every_backend_matches_reference(
    seed, batch, kv_heads, group, tq, extra_keys, dh, dv, mask_kind, causal, dtype
):
    tk = tq + extra_keys
    q, k, v, mask = _random_call(
        seed, batch, kv_heads * group, kv_heads, tq, tk, dh, dv, mask_kind, causal, dtype
    )
    tolerance = {torch.float32: 2e-5, torch.float64: 1e-10, torch.bfloat16: 3e-2}[dtype]
    grad_out = torch.randn(batch, kv_heads * group, tq, dv, dtype=dtype)

    def run(backend):
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = attention(*inputs, mask=mask, causal=causal, backend=backend).output
        out.backward(grad_out)
        return out.detach(), [t.grad for t in inputs]

    ref_out, ref_grads = run("reference")
    assert torch.isfinite(ref_out.float()).all()
    for backend in available_backends():
        out, grads = run(backend)
        scale = 1 + ref_out.abs().max().item()
        assert torch.allclose(out.float(), ref_out.float(), atol=tolerance * scale), backend
        for got, want in zip(grads, ref_grads):
            assert torch.isfinite(got.float()).all(), backend
            g_scale = 1 + want.abs().max().item()
            assert torch.allclose(got.float(), want.float(), atol=tolerance * 4 * g_scale), backend


@pytest.mark.parametrize("backend", ["reference", "sdpa", "auto"])
def test_fully_masked_rows_give_zero_output_and_finite_grads(backend):
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, requires_grad=True)
    v = torch.randn(1, 2, 5, 4, requires_grad=True)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    mask[..., 1, :] = False
    out = attention(q, k, v, mask=mask, backend=backend).output
    assert torch.all(out[:, :, 1] == 0)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[:, :, 1] == 0)


def test_causal_attention_ignores_the_future():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    before = attention(q, k, v, causal=True).output
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] += 5.0
    v2[:, :, 4:] -= 3.0
    after = attention(q, k2, v2, causal=True).output
    assert torch.allclose(before[:, :, :4], after[:, :, :4], atol=1e-6)
    assert not torch.allclose(before[:, :, 4:], after[:, :, 4:])


def test_causal_with_cache_is_end_aligned():
    torch.manual_seed(2)
    q, k, v = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    full = attention(q, k, v, causal=True).output
    for backend in available_backends():
        last_two = attention(q[:, :, 3:], k, v, causal=True, backend=backend).output
        assert torch.allclose(last_two, full[:, :, 3:], atol=1e-6), backend


def test_weights_only_on_request_and_explain_backend_says_why():
    q = torch.randn(1, 1, 3, 4)
    assert attention(q, q, q).weights is None
    weights = attention(q, q, q, need_weights=True).weights
    assert weights.shape == (1, 1, 3, 3)
    assert torch.allclose(weights.sum(-1), torch.ones(1, 1, 3))
    choice = explain_backend(q, q, q, need_weights=True)  # no gradient wanted
    assert choice.backend == "explicit"
    assert "need_weights" in choice.passed_over["sdpa"]
    assert explain_backend(q, q, q).backend == "sdpa"
    choice = explain_backend(q.requires_grad_(), q, q, need_weights=True)
    assert choice.backend == "reference"
    assert "carry none" in choice.passed_over["explicit"]
    assert "backend: reference" in str(choice)


def test_grouped_kv_heads_equal_repeated_heads():
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    grouped = attention(q, k, v).output
    repeated = attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)).output
    assert torch.allclose(grouped, repeated, atol=1e-6)


def test_grouped_kv_heads_reach_the_fused_kernel_unrepeated(monkeypatch):
    """With a padding mask too: SDPA gets the 2 key/value heads and enable_gqa, not a
    repeated copy of 4."""
    original, seen = torch.nn.functional.scaled_dot_product_attention, []

    def spy(query, key, value, **kwargs):
        seen.append((key.shape[1], value.shape[1], kwargs.get("enable_gqa")))
        return original(query, key, value, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    torch.manual_seed(4)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    keep = (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, None]  # (B, 1, 1, Tk)
    got = attention(q, k, v, mask=keep, backend="sdpa").output
    # (before it, once per process, a 1-head probe of how the kernel treats masked rows)
    assert seen[-1] == (2, 2, True) and all(heads != 4 for heads, _, _ in seen), seen
    expected = attention(q, k, v, mask=keep, backend="reference").output
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda: (torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)),
            ValueError,
            "shape \\(B, H, T, D\\)",
        ),
        (
            lambda: (torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 5), torch.randn(1, 1, 3, 4)),
            ValueError,
            "same width Dh",
        ),
        (
            lambda: (torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 2, 4)),
            ValueError,
            "same length Tk",
        ),
        (
            lambda: (torch.randn(2, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)),
            ValueError,
            "batch sizes",
        ),
        (
            lambda: (torch.randn(1, 3, 2, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)),
            ValueError,
            "heads",
        ),
        (
            lambda: (torch.randn(1, 1, 2, 4), torch.randn(1, 1, 0, 4), torch.randn(1, 1, 0, 4)),
            ValueError,
            "empty",
        ),
        (
            lambda: (
                torch.randn(1, 1, 2, 4),
                torch.randn(1, 1, 2, 4, dtype=torch.float64),
                torch.randn(1, 1, 2, 4),
            ),
            TypeError,
            "dtypes differ",
        ),
        (lambda: (torch.ones(1, 1, 2, 4, dtype=torch.long),) * 3, TypeError, "floating-point"),
    ],
)
def test_bad_inputs_raise_clear_errors(make, error, message):
    with pytest.raises(error, match=message):
        attention(*make())


def test_bad_masks_and_options_raise_clear_errors():
    q = torch.randn(2, 1, 3, 4)
    with pytest.raises(ValueError, match="does not broadcast"):
        attention(q, q, q, mask=torch.ones(3, 3, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask.bool"):
        attention(q, q, q, mask=torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown score"):
        attention(q, q, q, score="additive")
    with pytest.raises(ValueError, match="takes no scale"):
        attention(q, q, q, score="dot", scale=0.5)
    with pytest.raises(ValueError, match="unknown attention backend"):
        attention(q, q, q, backend="flash9")
    with pytest.raises(ValueError, match="cannot serve"):
        attention(q, q, q, need_weights=True, backend="sdpa")
    with pytest.raises(ValueError, match="dropout"):
        attention(q, q, q, dropout=1.5)


def test_package_reexports_the_core():
    assert qkv.attention is attention
    assert qkv.padding_mask is padding_mask


def test_auto_routes_a_learned_bias_to_the_chunked_kernel():
    q = torch.randn(1, 2, 4, 8)
    bias = torch.zeros(1, 2, 4, 4, requires_grad=True)
    choice = explain_backend(q, q, q, mask=bias)
    assert choice.backend == "chunked" and "requires grad" in choice.passed_over["sdpa"]
    with torch.no_grad():
        assert explain_backend(q, q, q, mask=bias).backend == "sdpa"


def test_masked_softmax_without_grad_takes_the_fused_path_and_agrees():
    scores = torch.randn(4, 6)
    mask = torch.rand(4, 6) > 0.5
    mask[2] = False
    with torch.no_grad():
        fast = masked_softmax(scores, mask)
    slow = masked_softmax(scores.clone().requires_grad_(True), mask).detach()
    assert torch.allclose(fast, slow, atol=1e-7)
    assert torch.all(fast[2] == 0) and torch.isfinite(fast).all()


@pytest.mark.parametrize("kind", ["none", "bool", "bias"])
@pytest.mark.parametrize("causal", [False, True])
def test_weights_for_inspection_equal_the_differentiable_ones_on_large_matrices(kind, causal):
    # 1 x 2 x 1024 x 1040 float32 is over 8 MiB: the inspection weights are filled block by block
    from qkv.functional.backends.explicit_backend import inspection_weights

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 1024, 16), torch.randn(1, 2, 1040, 16)
    mask = None
    if kind == "bool":
        mask = torch.rand(1, 1, 1024, 1040) > 0.5
        mask[..., 7, :] = False  # a row with nothing to attend: zeros, not NaN
    elif kind == "bias":
        mask = torch.randn(1, 2, 1, 1040)
    fast = inspection_weights(q, k, mask, causal, 0.25)
    slow = attention_weights(q, k, mask, causal, 0.25)  # the equations
    torch.testing.assert_close(fast, slow)
    assert not fast.isnan().any()
    if kind == "bool":
        assert torch.all(fast[0, :, 7] == 0)


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_the_reference_backend_is_the_equations_with_or_without_grad(monkeypatch, grad):
    from qkv.functional.backends import explicit, reference

    def refuse(*args):
        raise AssertionError("the reference backend ran the explicit kernel")

    for name in ("softmax_block", "plan_blocks", "mask_and_normalise", "explicit_attention"):
        for module in (explicit, reference):  # wherever the name is bound
            monkeypatch.setattr(module, name, refuse, raising=module is explicit)
    q = torch.randn(1, 2, 4, 8, requires_grad=grad)
    mask = torch.rand(1, 1, 4, 4) > 0.3
    out, weights = attention(q, q, q, mask=mask, need_weights=True, backend="reference")
    expected = masked_softmax((q @ q.transpose(-2, -1)) / 8**0.5, mask)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ q)


def test_weights_for_inspection_go_to_the_explicit_kernel_where_it_can():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    assert explain_backend(q, q, q, need_weights=True, weights_grad=False).backend == "explicit"
    choice = explain_backend(q, q, q, need_weights=True, weights_grad=False, dropout=0.5)
    assert choice.backend == "sdpa" and "dropout" in choice.passed_over["explicit"]
    out, weights = attention(q, q, q, need_weights=True, weights_grad=False, causal=True)
    ref = attention(q, q, q, need_weights=True, causal=True, backend="reference")
    torch.testing.assert_close(out, ref.output)
    torch.testing.assert_close(weights, ref.weights.detach())
    assert out.requires_grad and not weights.requires_grad


def test_weights_for_inspection_beside_a_fused_kernel_in_half_precision():
    q = torch.randn(1, 2, 3, 8, dtype=torch.bfloat16, requires_grad=True)
    choice = explain_backend(q, q, q, need_weights=True, weights_grad=False)
    assert choice.backend == "sdpa" and "float32/float64" in choice.passed_over["explicit"]
    out, weights = attention(q, q, q, need_weights=True, weights_grad=False)
    ref = attention(q, q, q, need_weights=True, backend="reference")
    torch.testing.assert_close(out, ref.output, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(weights, ref.weights.detach(), atol=1e-2, rtol=1e-2)
    assert out.requires_grad and not weights.requires_grad
