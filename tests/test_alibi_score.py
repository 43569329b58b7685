"""ALiBi runs as a flex score function, not a dense (Tq, Tk) bias, wherever that is exact."""

import pytest
import torch

import qkv.layers.multihead as multihead
from qkv.layers import MultiHeadAttention
from qkv.layers.relative_positions import ALiBi


@pytest.fixture
def calls(monkeypatch):
    """The (score_mod given, mask given) of every attention call the layer makes."""
    seen, attention = [], multihead.attention

    def recording(*args, **kwargs):
        seen.append((kwargs["score_mod"] is not None, kwargs["mask"] is not None))
        return attention(*args, **kwargs)

    monkeypatch.setattr(multihead, "attention", recording)
    return seen


def alibi_layer(dropout=0.0):
    torch.manual_seed(0)
    return MultiHeadAttention(32, 4, positions=ALiBi(4), dropout=dropout).eval()


@pytest.mark.parametrize("causal", [True, False])
def test_the_score_function_equals_the_dense_bias(calls, causal):
    layer, x = alibi_layer(), torch.randn(2, 150, 32)
    fast, _ = layer(x, causal=causal)
    dense, weights = layer(x, causal=causal, need_weights=True)  # weights: the dense bias
    assert calls == [(True, False), (False, True)]
    torch.testing.assert_close(fast, dense, rtol=1e-5, atol=1e-5)
    assert weights is not None


def test_a_float64_gradient_flows_through_the_score_function():
    layer = alibi_layer().double()
    x = torch.randn(1, 9, 32, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x, causal=True)[0], (x,))


def test_masks_and_attention_dropout_keep_the_dense_bias(calls):
    layer, x = alibi_layer(dropout=0.1), torch.randn(1, 6, 32)
    layer(x, mask=torch.ones(1, 1, 1, 6, dtype=torch.bool))  # a mask: not folded into a mod
    layer.train()
    layer(x, causal=True)  # dropout on the weights: only the dense path has it
    assert calls == [(False, True), (False, True)]
