"""The core on every device: backends agree, fully-masked rows never give NaN, cached
decoding equals the full pass.  On a GPU machine ``python -m pytest -m cuda`` runs these on
CUDA too (the ``device`` fixture of conftest.py); here they run on the CPU."""

import pytest
import torch
import torch.nn.functional as F

from qkv.functional import attention, attention_with_weights, available_backends, repeat_kv
from qkv.functional.backends import sdpa
from qkv.layers import KVCache, MultiHeadAttention

pytestmark = pytest.mark.cuda

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


def _call(device, dtype, causal, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, 7, 8, generator=gen)
    k, v = torch.randn(2, 2, 9, 8, generator=gen), torch.randn(2, 2, 9, 8, generator=gen)
    keep = torch.rand(2, 1, 7, 9, generator=gen) > 0.3
    keep[0, :, 3] = False  # a query with nothing to attend
    q, k, v = (t.to(device, dtype).requires_grad_() for t in (q, k, v))
    return q, k, v, keep.to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_backends_agree_in_outputs_and_gradients(device, dtype, causal):
    q, k, v, keep = _call(device, dtype, causal)
    grad = torch.randn(2, 4, 7, 8, generator=torch.Generator().manual_seed(1))
    grad = grad.to(device, dtype)
    results = {}
    for backend in available_backends():
        out = attention(q, k, v, mask=keep, causal=causal, backend=backend).output
        results[backend] = (out, *torch.autograd.grad(out, (q, k, v), grad))
    if dtype in (torch.float32, torch.float64):
        out, weights = attention_with_weights(q, k, v, mask=keep, causal=causal)
        results["explicit"] = (out, *torch.autograd.grad(out, (q, k, v), grad))
    want = results.pop("reference")
    for backend, got in results.items():
        for a, b in zip(got, want):  # bf16: tolerance relative to the largest value
            assert torch.isfinite(a).all(), backend
            atol = TOLERANCE[dtype] * (1 + b.abs().max().item())
            torch.testing.assert_close(
                a.float(), b.float(), atol=atol, rtol=TOLERANCE[dtype], msg=backend
            )


@pytest.mark.parametrize("mask_kind", ["bool", "bias"])
def test_fully_masked_rows_are_zero_never_nan_on_every_backend(device, mask_kind):
    q, k, v, keep = _call(device, torch.float32, causal=False)
    mask = keep if mask_kind == "bool" else torch.zeros(keep.shape, device=device)
    if mask_kind == "bias":
        mask = mask.masked_fill(~keep, float("-inf"))
    # the probe (one tiny call) says what the raw kernel does on these shapes too: zeros, or
    # NaN, which the backend's fix-up must then replace
    raw = F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=mask)
    zeroes = sdpa.zeroes_fully_masked_rows(device.type, q.dtype, q.shape[-1])
    assert zeroes == bool(torch.all(raw[0, :, 3] == 0))
    assert zeroes or raw[0, :, 3].isnan().all()
    for backend in available_backends():
        out = attention(q, k, v, mask=mask, backend=backend).output
        assert torch.all(out[0, :, 3] == 0), backend
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        assert all(torch.isfinite(g).all() for g in grads), backend


@pytest.mark.parametrize("num_kv_heads", [4, 1])
def test_multihead_cached_decoding_equals_the_full_pass(device, num_kv_heads):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=num_kv_heads).to(device).eval()
    x = torch.randn(2, 6, 16, device=device)
    with torch.no_grad():
        full, _ = layer(x, causal=True)
        cache = KVCache()
        steps = [layer(x[:, :2], causal=True, cache=cache)[0]]
        steps += [layer(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
