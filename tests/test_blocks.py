"""Feed-forward and Transformer blocks: equal to PyTorch's layers with copied weights, post-LN
and pre-LN, cached decoding equal to teacher forcing, causality, attention weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv.layers.blocks import DecoderBlock, DecoderLayerState, EncoderBlock
from qkv.layers.feedforward import FeedForward
from qkv.models.base import select_state
from qkv.models.transformer_stack import load_torch_decoder_layer, load_torch_encoder_layer

D, H, FF = 16, 4, 32


def _padding(lengths: list[int], total: int) -> torch.Tensor:
    """(B, 1, 1, total) True at real positions, and PyTorch's (B, total) True at padding."""
    keep = torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]
    return keep[:, None, None, :]


def test_feed_forward_is_the_two_layer_formula():
    torch.manual_seed(0)
    ff = FeedForward(D, FF, activation="gelu")
    x = torch.randn(2, 3, D)
    expected = F.gelu(x @ ff.expand.weight.T + ff.expand.bias) @ ff.contract.weight.T
    torch.testing.assert_close(ff(x), expected + ff.contract.bias)
    with pytest.raises(ValueError, match="activation='swish'"):
        FeedForward(D, FF, activation="swish")
    with pytest.raises(ValueError, match="dropout"):
        FeedForward(D, FF, dropout=1.0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_equals_torch_layer(norm_first, activation):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    block = EncoderBlock(D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first)
    load_torch_encoder_layer(block, layer)
    x = torch.randn(3, 6, D)
    keep = _padding([6, 4, 1], 6)
    ours = block(x, mask=keep).hidden
    theirs = layer(x, src_key_padding_mask=~keep[:, 0, 0])  # PyTorch: True = ignore
    real = keep[:, 0, 0]
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch_layer(norm_first):
    torch.manual_seed(2)
    layer = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    block = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first)
    load_torch_decoder_layer(block, layer)
    x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    keep = _padding([7, 3], 7)
    ours = block(x, memory, memory_mask=keep).hidden
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    theirs = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=~keep[:, 0, 0])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_post_ln_output_is_normalised_pre_ln_is_not():
    torch.manual_seed(3)
    x = 5 * torch.randn(2, 4, D) + 3
    post = EncoderBlock(D, H, FF, dropout=0.0)(x).hidden
    pre = EncoderBlock(D, H, FF, dropout=0.0, norm_first=True)(x).hidden
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(post.var(-1, unbiased=False), torch.ones(2, 4), atol=1e-3, rtol=0)
    assert pre.mean(-1).abs().min() > 0.5  # the residual stream keeps the input's offset


def test_encoder_block_weights_respect_padding():
    torch.manual_seed(4)
    block = EncoderBlock(D, H, FF, dropout=0.0)
    out = block(torch.randn(2, 5, D), mask=_padding([5, 2], 5), need_weights=True)
    weights = out.self_attention
    assert weights.shape == (2, H, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, 5))
    assert torch.all(weights[1, :, :, 2:] == 0)
    assert block(torch.randn(2, 5, D)).self_attention is None


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_with_cache_equals_teacher_forcing(norm_first):
    torch.manual_seed(5)
    block = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first).eval()
    x, memory = torch.randn(2, 6, D), torch.randn(2, 4, D)
    keep = _padding([4, 2], 4)
    full = block(x, memory, memory_mask=keep, need_weights=True)
    state = block.start(memory)
    steps = [block(x[:, t : t + 1], memory_mask=keep, state=state) for t in range(6)]
    torch.testing.assert_close(
        torch.cat([s.hidden for s in steps], 1), full.hidden, atol=1e-5, rtol=1e-5
    )
    assert state.self_cache.length == 6
    # the causal self-attention weights are lower-triangular; padded memory gets weight 0
    assert torch.all(full.self_attention.triu(1) == 0)
    assert torch.all(full.cross_attention[1, :, :, 2:] == 0)


def test_decoder_block_is_causal():
    torch.manual_seed(6)
    block = DecoderBlock(D, H, FF, dropout=0.0)
    x, memory = torch.randn(1, 5, D), torch.randn(1, 3, D)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, D)
    before, after = block(x, memory).hidden, block(changed, memory).hidden
    torch.testing.assert_close(before[:, :3], after[:, :3])
    assert not torch.allclose(before[:, 3:], after[:, 3:])


def test_decoder_state_reorders_along_the_batch():
    torch.manual_seed(7)
    block = DecoderBlock(D, H, FF, dropout=0.0).eval()
    x, memory = torch.randn(3, 4, D), torch.randn(3, 5, D)
    state = block.start(memory)
    block(x[:, :2], state=state)
    order = torch.tensor([2, 0, 0])
    picked = select_state(state, order)
    assert isinstance(picked, DecoderLayerState)
    out = block(x[order, 2:3], state=picked).hidden
    expected = block(x[order, :3], memory[order]).hidden[:, 2:3]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_decoder_block_needs_memory_or_state():
    block = DecoderBlock(D, H, FF)
    x, memory = torch.randn(1, 2, D), torch.randn(1, 3, D)
    with pytest.raises(ValueError, match="exactly one"):
        block(x)
    with pytest.raises(ValueError, match="exactly one"):
        block(x, memory, state=block.start(memory))
    with pytest.raises(ValueError, match="divisible"):
        EncoderBlock(10, 3, FF)
