"""Score modules and the general attention layer: hand-computed examples and gradcheck."""

import math

import pytest
import torch
from torch.autograd import gradcheck

from qkv.layers import (
    AdditiveScore,
    Attention,
    BilinearScore,
    DotScore,
    ScaledDotScore,
    Score,
    available_scores,
    make_score,
    register_score,
)

# A 2 x 3 example: two queries, three keys, all in 2-d.
Q = torch.tensor([[[1.0, 2.0], [0.0, -1.0]]])  # (1, 2, 2)
K = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)


def test_dot_score_by_hand():
    expected = torch.tensor([[[1.0, 2.0, 3.0], [0.0, -1.0, -1.0]]])
    assert torch.equal(DotScore()(Q, K), expected)


def test_scaled_dot_score_by_hand():
    expected = torch.tensor([[[1.0, 2.0, 3.0], [0.0, -1.0, -1.0]]]) / math.sqrt(2)
    assert torch.allclose(ScaledDotScore()(Q, K), expected)


def test_bilinear_score_by_hand():
    score = BilinearScore(query_dim=2, key_dim=2)
    with torch.no_grad():
        score.weight.weight.copy_(torch.tensor([[2.0, 0.0], [1.0, -1.0]]))  # W
    # W k for k = (1,0), (0,1), (1,1): (2,1), (0,-1), (2,0); then q . W k
    expected = torch.tensor([[[4.0, -2.0, 2.0], [-1.0, 1.0, 0.0]]])
    assert torch.allclose(score(Q, K), expected)


def test_additive_score_by_hand():
    score = AdditiveScore(query_dim=2, key_dim=2, hidden_dim=1)
    with torch.no_grad():
        score.query_proj.weight.copy_(torch.tensor([[1.0, 0.0]]))  # W_q q = q_1
        score.key_proj.weight.copy_(torch.tensor([[0.0, 1.0]]))  # W_k k = k_2
        score.key_proj.bias.zero_()
        score.v.weight.copy_(torch.tensor([[2.0]]))
    # v tanh(q_1 + k_2): q_1 = 1, 0 and k_2 = 0, 1, 1
    expected = 2 * torch.tanh(torch.tensor([[[1.0, 2.0, 2.0], [0.0, 1.0, 1.0]]]))
    assert torch.allclose(score(Q, K), expected)


@pytest.mark.parametrize("name", ["dot", "scaled_dot", "general", "additive"])
def test_every_score_passes_gradcheck(name):
    torch.manual_seed(0)
    score = make_score(name, query_dim=3, key_dim=3, hidden_dim=4).double()
    q = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda q, k: score(q, k), (q, k))
    # and through the whole layer: projections, masked softmax, weighted sum
    layer = Attention(
        query_dim=3, input_dim=3, key_dim=3, value_dim=2, score=name, hidden_dim=4
    ).double()
    mask = torch.tensor([[[True, True, False, True]], [[True, False, False, False]]])
    assert gradcheck(lambda q, x: layer(q, x, mask=mask)[0], (q, k))


def test_attention_layer_weights_sum_to_one_and_respect_the_mask():
    torch.manual_seed(1)
    layer = Attention(query_dim=5, input_dim=6, key_dim=4, value_dim=3, score="general")
    inputs = torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, True, False], [True, False, True, False]])[:, None, :]
    output, weights = layer(torch.randn(2, 3, 5), inputs, mask=mask)
    assert output.shape == (2, 3, 3) and weights.shape == (2, 3, 4)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3))
    assert torch.all(weights.masked_select(~mask.expand(2, 3, 4)) == 0)
    # separate projections: the output is a weighted sum of W_V x
    expected = weights @ layer.value_proj(inputs)
    assert torch.allclose(output, expected, atol=1e-6)


def test_attention_layer_without_projections_attends_over_inputs_directly():
    layer = Attention(query_dim=2, input_dim=2, score="dot")
    output, weights = layer(Q, K)
    # dot scores [[1, 2, 3], [0, -1, -1]]; softmax by hand, then weights @ K with K's rows
    # (1, 0), (0, 1), (1, 1)
    e = math.e
    first = torch.tensor([e, e**2, e**3]) / (e + e**2 + e**3)
    second = torch.tensor([1, 1 / e, 1 / e]) / (1 + 2 / e)
    torch.testing.assert_close(weights[0], torch.stack([first, second]))
    expected = torch.tensor(
        [[first[0] + first[2], first[1] + first[2]], [second[0] + second[2], second[1] + second[2]]]
    )
    torch.testing.assert_close(output[0], expected)


def test_prepared_memory_serves_every_decoding_step_like_one_batched_call():
    """Memory prepared once, then attended one query at a time (as a decoder does), gives
    what all the queries attended together give, and the memory is not changed by use."""
    torch.manual_seed(2)
    layer = Attention(query_dim=4, input_dim=4, score="additive")
    inputs, queries = torch.randn(2, 5, 4), torch.randn(2, 3, 4)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, :]
    memory = layer.memory(inputs)
    before = [t.clone() for t in memory]
    steps = [layer.attend(queries[:, t : t + 1], memory, mask=mask) for t in range(3)]
    together = layer(queries, inputs, mask=mask)
    torch.testing.assert_close(torch.cat([out for out, _ in steps], 1), together[0])
    torch.testing.assert_close(torch.cat([w for _, w in steps], 1), together[1])
    assert all(torch.equal(a, b) for a, b in zip(memory, before))
    assert torch.all(together[1][1, :, 2:] == 0)


def test_register_a_new_score():
    class NegativeDistance(Score):
        def score(self, query, prepared_key):
            return -torch.cdist(query, prepared_key)

    register_score("neg_distance", lambda **_: NegativeDistance())
    assert "neg_distance" in available_scores()
    layer = Attention(query_dim=2, input_dim=2, score="neg_distance")
    _, weights = layer(Q, K)
    assert weights[0, 0].argmax() == 2  # (1, 2) is nearest to (1, 1)


def test_score_errors_are_clear():
    with pytest.raises(ValueError, match="unknown score"):
        make_score("cosine-ish", query_dim=2, key_dim=2)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        make_score("dot", query_dim=2, key_dim=3)
    layer = Attention(query_dim=2, input_dim=3)
    with pytest.raises(ValueError, match=r"inputs must be \(B, Tk, 3\)"):
        layer(torch.randn(1, 1, 2), torch.randn(1, 4, 2))
    with pytest.raises(TypeError, match="boolean"):
        layer(torch.randn(1, 1, 2), torch.randn(1, 4, 3), mask=torch.ones(1, 1, 4))
