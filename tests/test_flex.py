"""qkv.flex_attention against the reference with the equivalent dense mask or bias, and
against PyTorch's own flex_attention (eager, forward) on the same mask/score functions."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qkv
from qkv.errors import QkvError
from qkv.functional import and_masks, create_block_mask, flex_attention, or_masks
from qkv.functional import patterns as P


def dense_mask(mask_mod, batch, heads, tq, tk):
    """The (B, H, Tq, Tk) mask of ``mask_mod``, evaluated the plain way (one big grid)."""
    b, h = torch.arange(batch).view(-1, 1, 1, 1), torch.arange(heads).view(1, -1, 1, 1)
    i, j = torch.arange(tq).view(1, 1, -1, 1), torch.arange(tk).view(1, 1, 1, -1)
    return mask_mod(b, h, i, j).expand(batch, heads, tq, tk)


def reference(q, k, v, mask=None, bias=None, scale=None):
    """Dense attention from its definition and lse; a fully masked row gives 0 and -inf."""
    repeats = q.shape[1] // k.shape[1]
    k = k.expand(q.shape[0], -1, -1, -1).repeat_interleave(repeats, 1)
    v = v.expand(q.shape[0], -1, -1, -1).repeat_interleave(repeats, 1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    empty = scores.isneginf().all(-1, keepdim=True)  # rows with no key
    lse = scores.masked_fill(empty, 0.0).logsumexp(-1, keepdim=True)
    weights = (scores - lse).exp().masked_fill(empty, 0.0)
    return weights @ v, lse.masked_fill(empty, float("-inf")).squeeze(-1)


def inputs(
    batch=2, heads=4, tq=37, tk=37, dim=8, kv_heads=None, kv_batch=None, dtype=torch.float64
):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, tq, dim, generator=gen, dtype=dtype)
    shape = (kv_batch or batch, kv_heads or heads, tk, dim)
    k = torch.randn(shape, generator=gen, dtype=dtype)
    v = torch.randn(shape, generator=gen, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)]


def assert_same(
    q,
    k,
    v,
    *,
    mask_mod=None,
    score_mod=None,
    bias=None,
    block=8,
    B=None,
    H=None,
    captured=(),
    dense=None,
    **kw,
):
    tq, tk = q.shape[2], k.shape[2]
    block_mask = (
        None if mask_mod is None else create_block_mask(mask_mod, B, H, tq, tk, BLOCK_SIZE=block)
    )
    out, lse = flex_attention(
        q, k, v, score_mod=score_mod, block_mask=block_mask, return_lse=True, **kw
    )
    mask = dense
    if mask is None and mask_mod is not None:
        mask = dense_mask(mask_mod, q.shape[0], q.shape[1], tq, tk)
    want, want_lse = reference(q, k, v, mask=mask, bias=bias)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(lse, want_lse)
    grad = torch.randn_like(out)
    tensors = (q, k, v, *captured)
    got = torch.autograd.grad((out * grad).sum() + _finite(lse).sum(), tensors)
    expected = torch.autograd.grad((want * grad).sum() + _finite(want_lse).sum(), tensors)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    assert not any(t.isnan().any() for t in (out, lse, *got))


def _finite(lse):
    return lse.masked_fill(lse.isneginf(), 0.0)


def test_no_mask_equals_dense_attention():
    assert_same(*inputs())


@pytest.mark.parametrize("block", [8, 5, (8, 16), 64])
def test_causal_for_block_sizes_that_do_not_divide_the_length(block):
    assert_same(*inputs(), mask_mod=P.causal, block=block)


def test_query_and_key_lengths_differ():
    q, k, v = inputs(tq=21, tk=45)
    assert_same(q, k, v, mask_mod=lambda b, h, i, j: j <= i + 24, block=(8, 16))
    assert_same(q, k, v, mask_mod=P.sliding_window(9), block=(4, 8))


def test_grouped_query_attention_without_repeating_keys():
    q, k, v = inputs(heads=6, kv_heads=2)
    assert_same(q, k, v, mask_mod=P.sliding_window(10), enable_gqa=True)
    with pytest.raises(QkvError, match="enable_gqa=True"):
        flex_attention(q, k, v)


def test_a_key_value_batch_of_one_serves_every_query_batch():
    q, k, v = inputs(batch=3, kv_batch=1, heads=4, kv_heads=2)
    assert_same(q, k, v, mask_mod=P.causal, enable_gqa=True)


def test_per_batch_and_per_head_block_masks():
    q, k, v = inputs(batch=2, heads=3)
    ids = torch.tensor([[0] * 10 + [1] * 27, [0] * 30 + [1] * 7])
    assert_same(q, k, v, mask_mod=and_masks(P.causal, P.document(ids)), B=2)
    per_head = lambda b, h, i, j: (i - j).abs() <= 3 * h + 1  # noqa: E731
    assert_same(q, k, v, mask_mod=per_head, H=3, block=4)
    assert_same(q, k, v, mask_mod=per_head, B=2, H=3, block=4)


def test_fully_masked_rows_give_zero_never_nan():
    q, k, v = inputs()
    late = lambda b, h, i, j: (j <= i) & (i >= 20)  # noqa: E731  queries 0..19 see nothing
    assert_same(q, k, v, mask_mod=late, block=8)
    out, lse = flex_attention(
        q,
        k,
        v,
        block_mask=create_block_mask(late, None, None, 37, 37, BLOCK_SIZE=8),
        return_lse=True,
    )
    assert out[:, :, :20].abs().max() == 0 and (lse[:, :, :20] == float("-inf")).all()


def test_score_mod_with_captured_tensors_gets_their_gradients():
    q, k, v = inputs(heads=2)
    bias = torch.randn(2, 2, 37, 37, dtype=torch.float64, requires_grad=True)
    chained = lambda s, b, h, i, j: s + bias[b][h][i][j]  # noqa: E731  vmap semantics
    assert_same(q, k, v, score_mod=chained, bias=bias, captured=(bias,), mask_mod=P.causal)
    broadcast = lambda s, b, h, i, j: s + bias[b, h, i, j]  # noqa: E731
    assert_same(q, k, v, score_mod=broadcast, bias=bias, captured=(bias,))


def test_bundled_query_blocks_with_score_mod_gqa_and_a_shared_key_batch():
    """A window's inner query blocks run as one batched tile: with a score_mod reading a
    captured tensor, grouped heads, a key/value batch of one, and masks per batch."""
    from qkv.functional.backends.flex_plan import plan_flex

    q, k, v = inputs(batch=3, kv_batch=1, heads=4, kv_heads=2)
    bias = torch.randn(3, 4, 37, 37, dtype=torch.float64, requires_grad=True)
    chained = lambda s, b, h, i, j: s + bias[b][h][i][j]  # noqa: E731  vmap semantics
    window = P.sliding_window(10)
    block_mask = create_block_mask(window, None, None, 37, 37, BLOCK_SIZE=4)
    plan = plan_flex(block_mask, (q.shape, k.shape), 1.0, None)
    assert max(bundle.count for group in plan.groups for bundle in group.bundles) > 3
    kw = dict(enable_gqa=True, block=4, mask_mod=window)
    assert_same(q, k, v, score_mod=chained, bias=bias, captured=(bias,), **kw)
    q, k, v = inputs(batch=3, heads=4, kv_heads=2)
    lengths = torch.tensor([37, 20, 29])
    per_batch = lambda b, h, i, j: window(b, h, i, j) & (j < lengths[b])  # noqa: E731
    assert_same(q, k, v, enable_gqa=True, block=4, mask_mod=per_batch, B=3)


def test_mask_mod_indexing_captured_tensors_the_vmap_way():
    q, k, v = inputs(batch=2, heads=2)
    allowed = torch.rand(2, 2, 37, 37, generator=torch.Generator().manual_seed(1)) > 0.5
    assert_same(q, k, v, mask_mod=lambda b, h, i, j: allowed[b][h][i][j], B=2, H=2, dense=allowed)


def test_float64_gradcheck_through_mask_and_score_mod():
    q, k, v = (t.detach()[:1, :2, :9, :3].requires_grad_() for t in inputs())
    table = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    block_mask = create_block_mask(P.sliding_window(5), None, None, 9, 9, BLOCK_SIZE=4)

    def run(q, k, v, table):
        out, lse = flex_attention(
            q, k, v, score_mod=P.relative_bias(table), block_mask=block_mask, return_lse=True
        )
        return out, lse

    assert torch.autograd.gradcheck(run, (q, k, v, table))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precisions_accumulate_in_float32(dtype):
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in inputs())
    block_mask = create_block_mask(P.causal, None, None, 37, 37, BLOCK_SIZE=16)
    out, lse = flex_attention(q, k, v, block_mask=block_mask, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    want, _ = reference(
        *(t.detach().double() for t in (q, k, v)), mask=dense_mask(P.causal, 2, 4, 37, 37)
    )
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    out.sum().backward()
    assert q.grad.dtype == dtype and torch.isfinite(q.grad.float()).all()


def test_empty_blocks_are_never_computed(monkeypatch):
    """Count the key columns multiplied against queries (over a batched tile's blocks): the
    visited blocks only, forward (q k^T) and backward (q k^T again, dO v^T)."""
    q, k, v = inputs(batch=1, heads=1, tq=64, tk=64, dim=5)
    block_mask = create_block_mask(P.sliding_window(8), None, None, 64, 64, BLOCK_SIZE=8)
    columns = []

    def counting(product):
        def count(a, b, **kw):
            if b.shape[-2] == 5:  # (.., Dh, keys): a product with key or value columns
                columns.append(b.shape[0] * b.shape[-1])
            return product(a, b, **kw)

        return count

    monkeypatch.setattr(torch, "bmm", counting(torch.bmm))
    monkeypatch.setattr(torch, "matmul", counting(torch.matmul))
    out = flex_attention(q, k, v, block_mask=block_mask)
    visited = 8 + 7 * 16  # the first row block sees one block, the others two
    assert sum(columns) == visited
    out.sum().backward()
    assert sum(columns) == 3 * visited


def test_block_mask_is_built_tile_by_tile_and_prints(monkeypatch):
    import qkv.functional.block_mask as bm

    monkeypatch.setattr(bm, "BUILD_ELEMENTS", 64 * 32)  # 2 query blocks of 16 rows at a time
    shapes = []

    def mask_mod(b, h, i, j):
        shapes.append(torch.broadcast_shapes(b.shape, h.shape, i.shape, j.shape))
        return i >= j

    block_mask = create_block_mask(mask_mod, None, None, 128, 64, BLOCK_SIZE=16)
    assert max(s.numel() for s in shapes) <= 64 * 32
    dense = block_mask.to_dense()
    assert dense.shape == (1, 1, 8, 4) and dense[0, 0, 0].tolist() == [1, 0, 0, 0]
    assert block_mask.full_kv_num_blocks[0, 0].tolist() == [0, 1, 2, 3, 4, 4, 4, 4]
    assert block_mask.kv_num_blocks[0, 0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert block_mask.sparsity() == pytest.approx(100 * (1 - (1 + 2 + 3 + 4 + 16) / 32))
    text = str(block_mask)
    assert "BlockMask(shape=(1, 1, 128, 64)" in text and "░░" in text and "██" in text


def test_or_and_noop_masks():
    q, k, v = inputs()
    assert_same(q, k, v, mask_mod=or_masks(P.sliding_window(3), P.global_tokens(2)))
    assert_same(q, k, v, mask_mod=qkv.noop_mask)


@settings(max_examples=15, deadline=None)
@given(
    tq=st.integers(1, 40),
    extra=st.integers(0, 20),
    block_q=st.integers(1, 17),
    block_k=st.integers(1, 17),
    window=st.integers(1, 30),
)
def test_sliding_window_for_any_lengths_and_blocks(tq, extra, block_q, block_k, window):
    q, k, v = inputs(batch=1, heads=2, tq=tq, tk=tq + extra)
    shifted = lambda b, h, i, j: P.sliding_window(window)(b, h, i + extra, j)  # noqa: E731
    assert_same(q, k, v, mask_mod=shifted, block=(block_q, block_k))


def test_matches_pytorch_flex_attention_eager_forward():
    torch_flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = (t.detach().float() for t in inputs(batch=1, heads=2, tq=48, tk=48))
    slopes = qkv.functional.alibi_slopes(2)
    cases = [
        (and_masks(P.causal, P.sliding_window(20)), P.alibi(slopes)),
        (P.prefix_lm(10), P.softcap(5.0)),
        (or_masks(P.dilated(4, 3), P.global_tokens(3)), None),
    ]
    for mask_mod, score_mod in cases:
        ours = flex_attention(
            q,
            k,
            v,
            score_mod=score_mod,
            block_mask=create_block_mask(mask_mod, None, None, 48, 48, BLOCK_SIZE=16),
        )
        theirs_mask = torch_flex.create_block_mask(
            mask_mod, None, None, 48, 48, device="cpu", BLOCK_SIZE=16
        )
        theirs = torch_flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=theirs_mask)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_bad_input_raises_one_clear_error():
    q, k, v = inputs()
    block_mask = create_block_mask(P.causal, None, None, 37, 37, BLOCK_SIZE=8)
    with pytest.raises(QkvError, match="boolean"):
        flex_attention(
            q,
            k,
            v,
            block_mask=create_block_mask(lambda b, h, i, j: (i - j).double(), None, None, 37, 37),
        )
    with pytest.raises(QkvError, match="one value per element"):
        create_block_mask(lambda b, h, i, j: torch.stack([i >= j, i >= j]), None, None, 37, 37)
    with pytest.raises(QkvError, match="shape"):
        flex_attention(
            q, k, v, score_mod=lambda s, b, h, i, j: torch.stack([s, s]), block_mask=block_mask
        )
    with pytest.raises(QkvError, match="(created|built) for"):
        flex_attention(q[:, :, :30], k, v, block_mask=block_mask)
    with pytest.raises(QkvError, match="(created|built) for"):
        flex_attention(q, k, v, block_mask=create_block_mask(P.causal, 3, None, 37, 37))
    with pytest.raises(QkvError, match="(created|built) for"):
        flex_attention(q, k, v, block_mask=create_block_mask(P.causal, None, 5, 37, 37))
    for bad in (0, -3, (8, 0), 2.5, (8,)):
        with pytest.raises(QkvError, match="BLOCK_SIZE"):
            create_block_mask(P.causal, None, None, 37, 37, BLOCK_SIZE=bad)
