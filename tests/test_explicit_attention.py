"""attention_with_weights: one weight matrix gives the output, the weights and the backward.

Checked against the reference backend (outputs, weights and gradients), with float64
gradcheck, on both of its paths (batched for small matrices, block by block for large)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.functional import attention, attention_with_weights
from qkv.functional.backends import explicit


def _inputs(b, h, hkv, tq, tk, d, dv, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d, generator=gen, dtype=dtype, requires_grad=True)
    k = torch.randn(b, hkv, tk, d, generator=gen, dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, tk, dv, generator=gen, dtype=dtype, requires_grad=True)
    return q, k, v


def _mask(kind, b, tq, tk, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if kind == "bool":
        mask = torch.rand(b, 1, tq, tk, generator=gen) > 0.4
        mask[0, :, 0] = False  # a row with nothing to attend
        return mask
    if kind == "bias":
        return torch.randn(b, 1, 1, tk, generator=gen, dtype=dtype)
    return None


def _check_against_reference(q, k, v, mask, causal, atol=1e-10):
    ours = attention_with_weights(q, k, v, mask=mask, causal=causal)
    ref = attention(q, k, v, mask=mask, causal=causal, backend="reference", need_weights=True)
    torch.testing.assert_close(ours.output, ref.output, atol=atol, rtol=atol)
    torch.testing.assert_close(ours.weights, ref.weights.detach(), atol=atol, rtol=atol)
    assert not ours.weights.requires_grad
    grad = torch.randn_like(ref.output)
    mine = torch.autograd.grad(ours.output, (q, k, v), grad)
    theirs = torch.autograd.grad(ref.output, (q, k, v), grad)
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=atol)


@pytest.mark.parametrize("block", [None, 154, 33], ids=["batched", "head-pairs", "rows"])
@pytest.mark.parametrize("kind", ["none", "bool", "bias"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_reference_on_every_path(monkeypatch, block, kind, causal):
    monkeypatch.setattr(explicit, "CAUSAL_SPLIT_FROM", 2)  # causal pieces: blocks of 2 rows
    if block:  # every matrix is "large": blocks of two 7 x 11 heads, or of 3 rows of 11 keys
        monkeypatch.setattr(explicit, "BLOCKED_FROM_BYTES", 0)
        monkeypatch.setattr(explicit, "BLOCK_ELEMENTS", block)
    q, k, v = _inputs(2, 4, 2, 7, 11, 5, 3)  # grouped heads, Tq < Tk, Dv != Dh
    _check_against_reference(q, k, v, _mask(kind, 2, 7, 11, q.dtype), causal)


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 2),
    h=st.sampled_from([1, 2]),
    tq=st.integers(1, 9),
    tk=st.integers(1, 9),
    d=st.integers(1, 6),
    kind=st.sampled_from(["none", "bool", "bias"]),
    causal=st.booleans(),
    blocked=st.booleans(),
)
def test_property_equals_the_reference(b, h, tq, tk, d, kind, causal, blocked):
    if causal:
        tk = max(tk, tq)  # causal queries are the last positions of the keys
    q, k, v = _inputs(b, h, h, tq, tk, d, d + 1, seed=tq * 31 + tk)
    old = explicit.BLOCKED_FROM_BYTES, explicit.BLOCK_ELEMENTS, explicit.CAUSAL_SPLIT_FROM
    if blocked:
        explicit.BLOCKED_FROM_BYTES, explicit.BLOCK_ELEMENTS = 0, 2 * tk
        explicit.CAUSAL_SPLIT_FROM = 1
    try:
        _check_against_reference(q, k, v, _mask(kind, b, tq, tk, q.dtype), causal)
    finally:
        explicit.BLOCKED_FROM_BYTES, explicit.BLOCK_ELEMENTS, explicit.CAUSAL_SPLIT_FROM = old


@pytest.mark.parametrize("blocked", [False, True], ids=["batched", "blocked"])
def test_gradcheck_float64(monkeypatch, blocked):
    if blocked:
        monkeypatch.setattr(explicit, "BLOCKED_FROM_BYTES", 0)
        monkeypatch.setattr(explicit, "BLOCK_ELEMENTS", 8)
        monkeypatch.setattr(explicit, "CAUSAL_SPLIT_FROM", 1)
    q, k, v = _inputs(1, 2, 2, 4, 5, 3, 2)
    mask = _mask("bool", 1, 4, 5, q.dtype)
    function = lambda q, k, v: attention_with_weights(q, k, v, mask=mask, causal=True).output  # noqa: E731
    assert torch.autograd.gradcheck(function, (q, k, v))


def _plans(monkeypatch):
    """Plans of a (2, 3, 70, 5) matrix on every path: batched, head groups, row blocks."""
    monkeypatch.setattr(explicit, "BLOCKED_FROM_BYTES", 0)
    monkeypatch.setattr(explicit, "CAUSAL_SPLIT_FROM", 16)
    for block, causal in [(10**6, False), (10**6, True), (700, False), (60, False), (7, True)]:
        monkeypatch.setattr(explicit, "BLOCK_ELEMENTS", block)
        yield explicit.plan_blocks((2, 3, 70, 5), 4, causal)


def test_plan_blocks_tile_the_matrix_exactly_once(monkeypatch):
    """Every (b, h, row) is in exactly one block; every block is within the size limit."""
    paths = set()
    for plan in _plans(monkeypatch):
        count = torch.zeros(plan.shape[:-1])
        for block in plan.blocks:
            count[block.index] += 1
            assert count[block.index].numel() * 5 <= max(explicit.BLOCK_ELEMENTS, 5 * 70)
        assert torch.equal(count, torch.ones_like(count)), plan
        paths.add((len(plan.blocks), plan.causal))
    assert len(paths) == 5  # five different plans, not one path five times


def test_plan_one_writer_per_kv_gradient_region_and_it_runs_first(monkeypatch):
    for plan in _plans(monkeypatch):
        seen_heads = {}  # heads (as a hashable index) -> has its writer run yet
        for block in plan.backward_order:
            heads = str(block.head_index)
            if block.writes_kv_grad:
                assert heads not in seen_heads, f"two writers for {heads}:\n{plan}"
                assert block.keys == plan.shape[-1]  # the writer covers every key
                seen_heads[heads] = True
            else:
                assert seen_heads.get(heads), f"{block} adds before its writer:\n{plan}"
        heads_count = torch.zeros(plan.shape[:2])
        for block in plan.blocks:
            heads_count[block.head_index] += block.writes_kv_grad
        assert torch.equal(heads_count, torch.ones_like(heads_count))


def test_plan_causal_blocks_skip_keys_past_the_diagonal(monkeypatch):
    monkeypatch.setattr(explicit, "CAUSAL_SPLIT_FROM", 4)
    plan = explicit.plan_blocks((1, 1, 8, 12), 4, causal=True)  # 4 keys of cached prefix
    assert [(b.rows.start, b.rows.stop, b.keys) for b in plan.blocks] == [
        (0, 2, 6),
        (2, 4, 8),
        (4, 6, 10),
        (6, 8, 12),
    ]
    assert plan.band == 2 and [b.writes_kv_grad for b in plan.blocks] == [0, 0, 0, 1]
    assert all(b.keys == 12 for b in explicit.plan_blocks((1, 1, 8, 12), 4, False).blocks)
    assert "rows=6:8 keys=:12  writes dK, dV" in str(plan)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = _inputs(1, 1, 1, 3, 4, 2, 2, dtype=torch.float32)
    mask = torch.ones(1, 1, 3, 4, dtype=torch.bool)
    mask[..., 1, :] = False
    out, weights = attention_with_weights(q, k, v, mask=mask)
    assert torch.all(out[0, 0, 1] == 0) and torch.all(weights[0, 0, 1] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_editing_the_returned_weights_in_place_is_caught():
    q, k, v = _inputs(1, 1, 1, 3, 4, 2, 2)
    out, weights = attention_with_weights(q, k, v)
    weights.zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_refuses_what_it_cannot_serve_with_a_clear_error():
    q, k, v = _inputs(1, 1, 1, 3, 4, 2, 2, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="float32/float64 only.*use attention"):
        attention_with_weights(q, k, v)
    q, k, v = _inputs(1, 1, 1, 3, 4, 2, 2)
    bias = torch.zeros(1, 1, 1, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="float bias that requires grad"):
        attention_with_weights(q, k, v, mask=bias)
    with pytest.raises(ValueError, match="does not broadcast"):
        attention_with_weights(q, k, v, mask=torch.ones(2, 2, dtype=torch.bool))


def test_multihead_need_weights_uses_it_and_still_matches_torch():
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    ours = qkv.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 5, 16, requires_grad=True)
    out, weights = ours(x, need_weights=True)
    ref, ref_weights = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, ref_weights.detach(), atol=1e-5, rtol=1e-5)
    assert not weights.requires_grad
    (grad,) = torch.autograd.grad(out.sum(), x)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(grad, ref_grad, atol=1e-5, rtol=1e-5)
