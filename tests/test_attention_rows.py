"""Two promises of qkv.attention, kept by every backend and every way of asking for weights:
a query whose every key is masked gets output 0, weights 0 and finite gradients; a NaN in
a query makes its row NaN (NaN in, NaN out) -- a mask never turns it into a zero."""

import pytest
import torch

import qkv
from qkv.functional import available_backends
from qkv.functional.backends import get_backend

BLANK, NAN = 1, 3  # the query with nothing to attend; the query holding a NaN


def _inputs(mask_kind, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=gen) for _ in range(3))
    keep = torch.rand(2, 1, 5, 5, generator=gen) > 0.3
    keep[..., 0] = True  # every other query sees a key
    keep[..., BLANK, :] = False
    mask = keep if mask_kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, -torch.inf)
    return q, k, v, mask


def _set_row(mask, row, keep):
    keep = torch.tensor(keep)
    mask[..., row, :] = (
        keep if mask.dtype == torch.bool else torch.zeros(5).masked_fill(~keep, -torch.inf)
    )


def _weight_paths(backend, grad=True):
    """The (need_weights, weights_grad) a backend serves: every backend gives its output with
    weights for inspection beside; weights with gradients come from the equations, and
    without gradients also from the explicit kernel."""
    paths = [(False, True), (True, False)]
    if backend in ("reference", "auto") or (backend == "explicit" and not grad):
        paths.append((True, True))
    return paths


def _backends():
    return [*available_backends(), "auto"]


@pytest.mark.parametrize("mask_kind", ["bool", "bias"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", _backends())
def test_a_fully_masked_query_gets_zeros_and_finite_grads(backend, mask_kind, causal):
    q, k, v, mask = _inputs(mask_kind)
    if causal:  # end-aligned: query i of 3 sees keys 0 .. i + 2
        q, mask = q[:, :, :3], mask[..., 2:, :].clone()
        _set_row(mask, BLANK, [False] * 5)
        # query 0 may attend only keys past its diagonal: blank by mask and causal together
        _set_row(mask, 0, [False, False, False, True, True])
    blank = [0, BLANK] if causal else [BLANK]
    for need_weights, weights_grad in _weight_paths(backend):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out, weights = qkv.attention(
            *inputs,
            mask=mask,
            causal=causal,
            need_weights=need_weights,
            weights_grad=weights_grad,
            backend=backend,
        )
        assert torch.all(out[:, :, blank] == 0), (need_weights, weights_grad)
        if need_weights:
            assert torch.all(weights[:, :, blank] == 0)
            sums = weights.detach().sum(-1)
            seen = [i for i in range(q.shape[2]) if i not in blank]
            torch.testing.assert_close(sums[:, :, seen], torch.ones_like(sums[:, :, seen]))
        loss = out.sum() + (weights.sum() if need_weights and weights_grad else 0)
        grads = torch.autograd.grad(loss, inputs)
        assert all(torch.isfinite(g).all() for g in grads)
        assert torch.all(grads[0][:, :, blank] == 0)  # nothing flows back to a blank query


@pytest.mark.parametrize("mask_kind", ["none", "bool", "bias"])
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("backend", _backends())
def test_a_nan_query_stays_nan_with_or_without_a_mask(backend, grad, mask_kind):
    q, k, v, mask = _inputs(mask_kind)
    mask = None if mask_kind == "none" else mask
    q[0, 1, NAN, 2] = torch.nan
    want = qkv.attention(q, k, v, mask=mask, backend="reference", need_weights=True)
    for need_weights, weights_grad in _weight_paths(backend, grad):
        inputs = [t.clone().requires_grad_(grad) for t in (q, k, v)]
        out, weights = qkv.attention(
            *inputs,
            mask=mask,
            need_weights=need_weights,
            weights_grad=weights_grad,
            backend=backend,
        )
        assert out[0, 1, NAN].isnan().all(), (need_weights, weights_grad)
        finite = torch.ones(out.shape[:3], dtype=torch.bool)
        finite[0, 1, NAN] = False
        torch.testing.assert_close(out.detach()[finite], want.output[finite], atol=1e-5, rtol=0)
        if need_weights:
            assert weights[0, 1, NAN].isnan().all()
            torch.testing.assert_close(
                weights.detach()[finite], want.weights[finite], atol=1e-6, rtol=0
            )


@pytest.mark.parametrize("mask_kind", ["none", "bool", "bias"])
def test_attention_with_weights_keeps_a_nan_query_nan(mask_kind):
    q, k, v, mask = _inputs(mask_kind)
    mask = None if mask_kind == "none" else mask
    q[0, 1, NAN, 2] = torch.nan
    out, weights = qkv.attention_with_weights(q, k, v, mask=mask)
    assert out[0, 1, NAN].isnan().all() and weights[0, 1, NAN].isnan().all()
    assert torch.isfinite(out[1]).all() and torch.isfinite(weights[1]).all()
    if mask is not None:
        assert torch.all(out[:, :, BLANK] == 0) and torch.all(weights[:, :, BLANK] == 0)


def test_every_registered_backend_is_covered():
    # the loops above run over the registry: a backend added later is tested too
    assert {"sdpa", "chunked", "explicit", "reference"} <= set(available_backends())
    assert all(get_backend(name).name == name for name in available_backends())
