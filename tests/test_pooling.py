"""AttentionPooling and the per-item tagger head."""

import pytest
import torch

from qkv.errors import InputError
from qkv.layers import AttentionPooling, SequenceTagger


def test_one_query_is_the_softmax_weighted_mean_computed_by_hand():
    torch.manual_seed(0)
    pool = AttentionPooling(6, key_dim=4).double()
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    out = pool(x)
    scores = (pool.key(x) @ pool.query[0]) / 4**0.5  # (B, T)
    weights = torch.exp(scores) / torch.exp(scores).sum(dim=1, keepdim=True)
    expected = (weights.unsqueeze(-1) * x).sum(dim=1)  # (B, D)
    torch.testing.assert_close(out.pooled[:, 0], expected)
    torch.testing.assert_close(out.weights[:, 0], weights)
    assert out.pooled.shape == (3, 1, 6) and out.weights.shape == (3, 1, 5)


def test_several_queries_and_a_value_projection_give_one_vector_per_query():
    pool = AttentionPooling(8, num_queries=3, value_dim=5)
    out = pool(torch.randn(2, 7, 8))
    assert out.pooled.shape == (2, 3, 5) and out.weights.shape == (2, 3, 7)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 3))


def test_padded_items_get_exactly_zero_weight_and_do_not_change_the_result():
    torch.manual_seed(1)
    pool = AttentionPooling(6, num_queries=2)
    x = torch.randn(2, 6, 6)
    mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    out = pool(x, mask=mask)
    assert torch.equal(out.weights[0, :, 4:], torch.zeros(2, 2))
    changed = x.clone()
    changed[0, 4:] = 1e3  # whatever the padding holds
    torch.testing.assert_close(pool(changed, mask=mask).pooled, out.pooled)
    torch.testing.assert_close(pool(x[:1, :4]).pooled, out.pooled[:1])


def test_a_fully_padded_sequence_pools_to_zeros_not_nan():
    pool = AttentionPooling(4)
    out = pool(torch.randn(1, 3, 4), mask=torch.zeros(1, 3, dtype=torch.bool))
    assert torch.equal(out.pooled, torch.zeros(1, 1, 4))
    assert torch.equal(out.weights, torch.zeros(1, 1, 3))


def test_pooling_rejects_bad_shapes_and_masks_with_one_clear_error():
    pool = AttentionPooling(4)
    with pytest.raises(InputError, match="must be \\(B, T, D=4\\)"):
        pool(torch.randn(2, 3, 5))
    with pytest.raises(InputError, match="bool"):
        pool(torch.randn(2, 3, 4), mask=torch.ones(2, 3))


def test_tagger_without_positions_is_permutation_equivariant():
    torch.manual_seed(2)
    tagger = SequenceTagger(6, 5, num_layers=2, d_model=16, num_heads=4, positions=False).eval()
    x = torch.randn(2, 7, 6)
    permutation = torch.randperm(7)
    out = tagger(x).logits
    torch.testing.assert_close(tagger(x[:, permutation]).logits, out[:, permutation])


def test_tagger_with_positions_is_not_permutation_equivariant():
    torch.manual_seed(2)
    tagger = SequenceTagger(6, 5, num_layers=1, d_model=16, num_heads=4, positions=True).eval()
    x = torch.randn(1, 7, 6)
    permutation = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    assert not torch.allclose(tagger(x[:, permutation]).logits, tagger(x).logits[:, permutation])


def test_tagger_masks_padding_and_returns_per_block_weights():
    torch.manual_seed(3)
    tagger = SequenceTagger(6, 5, num_layers=2, d_model=16, num_heads=2).eval()
    x = torch.randn(2, 5, 6)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    out = tagger(x, mask=mask, need_weights=True)
    assert out.logits.shape == (2, 5, 5) and len(out.attention) == 2
    assert torch.equal(out.attention[0][0, :, :, 3:], torch.zeros(2, 5, 2))
    alone = tagger(x[:1, :3]).logits
    torch.testing.assert_close(out.logits[:1, :3], alone)


def test_tagger_with_no_layers_classifies_each_item_alone():
    tagger = SequenceTagger(6, 5, num_layers=0, positions=False).eval()
    x = torch.randn(2, 4, 6)
    torch.testing.assert_close(tagger(x).logits[:, 2], tagger(x[:, 2:3]).logits[:, 0])
