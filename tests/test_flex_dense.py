"""Dense patterns on the fused kernel: flex_attention with no block mask, or one that is
exactly the causal triangle, runs PyTorch's SDPA (is_causal) and must equal the tile kernel;
anything else -- a triangle with a hole, a mask that differs per batch or head, a
score_mod, lse asked for -- stays on the tile kernel."""

import pytest
import torch
import torch.nn.functional as F

from qkv.functional import create_block_mask, flex_attention
from qkv.functional import patterns as P
from tests.test_flex import dense_mask, inputs, reference


def outputs_and_grads(q, k, v, **kw):
    out = flex_attention(q, k, v, **kw)
    grad = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return out, torch.autograd.grad((out * grad).sum(), (q, k, v))


def kernel(q, k, v, **kw):
    """The tile kernel's answer: return_lse=True keeps a call off the fused kernel."""
    out, _ = flex_attention(q, k, v, return_lse=True, **kw)
    grad = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return out, torch.autograd.grad((out * grad).sum(), (q, k, v))


@pytest.mark.parametrize("block", [8, 5, 64])
@pytest.mark.parametrize("gqa", [False, True])
def test_a_causal_block_mask_equals_the_tile_kernel_and_the_reference(block, gqa):
    q, k, v = inputs(heads=4, kv_heads=2 if gqa else None)
    block_mask = create_block_mask(P.causal, None, None, 37, 37, BLOCK_SIZE=block)
    assert block_mask.is_causal(2, 4)
    out, grads = outputs_and_grads(q, k, v, block_mask=block_mask, enable_gqa=gqa)
    want, want_grads = kernel(q, k, v, block_mask=block_mask, enable_gqa=gqa)
    torch.testing.assert_close(out, want)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b)
    expected, _ = reference(q, k, v, mask=dense_mask(P.causal, 2, 4, 37, 37))
    torch.testing.assert_close(out, expected)


def test_no_block_mask_equals_the_tile_kernel():
    q, k, v = inputs(tq=21, tk=45)
    out, grads = outputs_and_grads(q, k, v, scale=0.3)
    want, want_grads = kernel(q, k, v, scale=0.3)
    torch.testing.assert_close(out, want)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b)


def test_the_fused_kernel_serves_exactly_the_causal_triangle():
    def make(mask_mod, B=None, H=None, n=37, block=8):
        return create_block_mask(mask_mod, B, H, n, n, BLOCK_SIZE=block)

    assert make(P.causal).is_causal(2, 4)
    assert make(lambda b, h, i, j: j <= i).is_causal(2, 4)  # written another way
    assert make(P.causal, B=2, H=4).is_causal(2, 4)
    assert not make(P.sliding_window(9)).is_causal(2, 4)
    assert not make(P.prefix_lm(5)).is_causal(2, 4)
    # the causal blocks, but a hole inside the diagonal tiles: no key for query 0
    assert not make(lambda b, h, i, j: j < i).is_causal(2, 4)
    # causal for batch 0, which built the blocks (B=None), not for batch 1
    assert not make(lambda b, h, i, j: (j <= i) & ((b == 0) | (j < i))).is_causal(2, 4)
    assert not create_block_mask(P.causal, None, None, 37, 45).is_causal(2, 4)
    assert not create_block_mask(P.causal, None, None, 37, 37, BLOCK_SIZE=(8, 16)).is_causal(2, 4)


def test_a_triangle_with_a_hole_stays_on_the_tile_kernel():
    q, k, v = inputs()
    strictly_below = lambda b, h, i, j: j < i  # noqa: E731
    out = flex_attention(q, k, v, block_mask=create_block_mask(strictly_below, None, None, 37, 37))
    want, _ = reference(q, k, v, mask=dense_mask(strictly_below, 2, 4, 37, 37))
    torch.testing.assert_close(out, want)
    assert (out[:, :, 0] == 0).all()  # query 0 attends nothing: 0, as the tile kernel gives


def test_a_nan_query_stays_nan_on_the_fused_kernel():
    q, k, v = (t.detach().float() for t in inputs())
    q[0, 1, 5, 2] = float("nan")
    block_mask = create_block_mask(P.causal, None, None, 37, 37)
    for mask in (None, block_mask):
        out = flex_attention(q, k, v, block_mask=mask)
        assert out[0, 1, 5].isnan().all()
        assert not out[1].isnan().any() and not out[0, 0].isnan().any()


def test_it_is_sdpa_that_runs(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(kwargs.get("is_causal"))
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    q, k, v = inputs()
    flex_attention(q, k, v, block_mask=create_block_mask(P.causal, None, None, 37, 37))
    flex_attention(q, k, v)
    flex_attention(q, k, v, block_mask=create_block_mask(P.sliding_window(9), None, None, 37, 37))
    flex_attention(q, k, v, score_mod=P.softcap(20.0))
    assert calls == [True, False]
