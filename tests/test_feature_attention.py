"""SelfAttention2d: identity at gamma = 0, a hand-written reference otherwise, gradcheck."""

import pytest
import torch

from qkv.errors import InputError
from qkv.layers import SelfAttention2d


def _reference(layer: SelfAttention2d, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The equations of the docstring, one position at a time in matrix form."""
    b, c, h, w = x.shape
    flat = x.reshape(b, c, h * w)  # (B, C, HW)
    q = torch.einsum("kc,bcp->bpk", layer.query.weight[:, :, 0, 0], flat) + layer.query.bias
    k = torch.einsum("kc,bcp->bpk", layer.key.weight[:, :, 0, 0], flat) + layer.key.bias
    v = torch.einsum("dc,bcp->bpd", layer.value.weight[:, :, 0, 0], flat) + layer.value.bias
    scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5  # (B, HW, HW)
    weights = torch.softmax(scores, dim=-1)
    attended = (weights @ v).transpose(1, 2).reshape(b, c, h, w)
    return x + layer.gamma * attended, weights


def test_gamma_zero_is_the_identity():
    layer = SelfAttention2d(16)
    x = torch.randn(2, 16, 5, 4)
    assert torch.equal(layer(x).output, x)


def test_equals_the_hand_written_reference_with_gamma_nonzero():
    torch.manual_seed(0)
    layer = SelfAttention2d(8, key_channels=3).double()
    with torch.no_grad():
        layer.gamma.fill_(0.7)
    x = torch.randn(2, 8, 3, 4, dtype=torch.float64)
    out = layer(x, need_weights=True)
    expected, weights = _reference(layer, x)
    torch.testing.assert_close(out.output, expected)
    torch.testing.assert_close(out.weights, weights)
    assert out.weights.shape == (2, 12, 12)


def test_gradcheck_float64():
    torch.manual_seed(1)
    layer = SelfAttention2d(4, key_channels=2).double()
    with torch.no_grad():
        layer.gamma.fill_(0.5)
    x = torch.randn(1, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: layer(t).output, (x,))
    assert torch.autograd.gradcheck(lambda t: _reference(layer, t)[0], (x,))


def test_gamma_learns_from_zero():
    layer = SelfAttention2d(4)
    layer(torch.randn(2, 4, 3, 3)).output.square().sum().backward()
    assert layer.gamma.grad is not None and layer.gamma.grad != 0


def test_masked_positions_get_exactly_zero_weight():
    layer = SelfAttention2d(8)
    mask = torch.ones(1, 3, 3, dtype=torch.bool)
    mask[0, 0, :] = False
    out = layer(torch.randn(1, 8, 3, 3), mask=mask, need_weights=True)
    assert torch.equal(out.weights[0, :, :3], torch.zeros(9, 3))
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, 9))


def test_bad_input_is_one_clear_error():
    layer = SelfAttention2d(8)
    with pytest.raises(InputError, match="feature map"):
        layer(torch.randn(2, 4, 3, 3))
    with pytest.raises(InputError, match="bool"):
        layer(torch.randn(1, 8, 3, 3), mask=torch.ones(1, 3, 3))
