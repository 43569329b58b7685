"""Edge cases of the functional core (issue 11): causal with Tq > Tk, NaN scores, the
fused kernel's fully-masked rows per device type."""

import pytest
import torch

from qkv.errors import InputError
from qkv.functional import (
    attention,
    attention_weights,
    attention_with_weights,
    available_backends,
    chunked_attention,
    explain_backend,
    masked_softmax,
    weights_from_lse,
)
from qkv.functional.backends import sdpa


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("backend", ["auto", "sdpa", "chunked", "reference"])
def test_causal_with_more_queries_than_keys_is_one_input_error_on_every_backend(backend, grad):
    assert set(available_backends()) <= {"sdpa", "chunked", "explicit", "reference"}
    q = torch.randn(1, 2, 5, 4, requires_grad=grad)
    k = v = torch.randn(1, 2, 3, 4, requires_grad=grad)
    with pytest.raises(InputError, match=r"Tk >= Tq.*Tq=5, Tk=3"):
        attention(q, k, v, causal=True, backend=backend)
    with pytest.raises(InputError, match="Tk >= Tq"):
        attention(q, k, v, causal=True, backend=backend, need_weights=backend == "reference")


def test_causal_with_more_queries_than_keys_in_the_other_entry_points():
    q, k = torch.randn(1, 1, 4, 2), torch.randn(1, 1, 2, 2)
    for call in (
        lambda: attention_with_weights(q, k, k, causal=True),
        lambda: explain_backend(q, k, k, causal=True),
        lambda: chunked_attention(q, k, k, causal=True),
        lambda: weights_from_lse(q, k, torch.zeros(1, 1, 4), causal=True),
        lambda: attention_weights(q, k, None, True, 1.0),
    ):
        with pytest.raises(InputError, match="Tk >= Tq"):
            call()
    assert attention(q, k, k).output.shape == (1, 1, 4, 2)  # without causal it is fine


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
def test_masked_softmax_nan_in_nan_out_on_both_paths(grad):
    scores = torch.tensor([[1.0, float("nan"), 2.0], [1.0, 2.0, 3.0], [5.0, 6.0, 7.0]])
    mask = torch.tensor([[True] * 3, [True] * 3, [False] * 3])
    weights = masked_softmax(scores.requires_grad_(grad), mask)
    assert weights[0].isnan().all()  # the NaN is not hidden
    expected = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1)  # 0.0900, 0.2447, 0.6652
    torch.testing.assert_close(weights[1].detach(), expected)
    assert torch.equal(weights[2].detach(), torch.zeros(3))  # nothing to attend: zeros
    if grad:
        (g,) = torch.autograd.grad(weights[1:].sum(), scores)
        assert torch.isfinite(g[1:]).all()


def test_masked_softmax_matches_torch_softmax_with_a_nan_anywhere():
    scores = torch.randn(4, 6)
    scores[2, 3] = float("nan")
    for s in (scores, scores.clone().requires_grad_()):
        torch.testing.assert_close(
            masked_softmax(s).detach(), torch.softmax(scores, -1), equal_nan=True
        )


def test_the_fully_masked_row_probe_runs_per_device_type_dtype_and_head_size(monkeypatch):
    asked = []
    monkeypatch.setattr(sdpa, "zeroes_fully_masked_rows", lambda *kind: asked.append(kind) or True)
    q = torch.randn(1, 1, 2, 4)
    attention(q, q, q, mask=torch.ones(2, 2, dtype=torch.bool), backend="sdpa")
    attention(q, q, q, backend="sdpa")  # no mask: nothing to probe
    assert asked == [("cpu", torch.float32, 4)]
    monkeypatch.undo()
    sdpa.zeroes_fully_masked_rows.cache_clear()
    assert isinstance(sdpa.zeroes_fully_masked_rows("cpu", torch.float32, 4), bool)
    sdpa.zeroes_fully_masked_rows("cpu", torch.float32, 4)
    assert sdpa.zeroes_fully_masked_rows.cache_info().currsize == 1  # probed once
    sdpa.zeroes_fully_masked_rows("cpu", torch.bfloat16, 4)
    assert sdpa.zeroes_fully_masked_rows.cache_info().currsize == 2  # each dtype its own


@pytest.mark.parametrize("mask_kind", ["bool", "bias"])
def test_the_fix_up_for_kernels_that_give_nan_keeps_rows_zero_and_grads_finite(
    monkeypatch, mask_kind
):
    monkeypatch.setattr(sdpa, "zeroes_fully_masked_rows", lambda *kind: False)
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    keep = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    keep[..., 1, :] = False
    mask = keep if mask_kind == "bool" else torch.zeros(3, 3).masked_fill(~keep, float("-inf"))
    out = attention(q, k, v, mask=mask, backend="sdpa").output
    ref = attention(q, k, v, mask=mask, backend="reference").output
    torch.testing.assert_close(out, ref)
    assert torch.all(out[:, :, 1] == 0)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
