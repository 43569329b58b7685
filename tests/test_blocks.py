"""Feed-forward and Transformer blocks: equal to PyTorch's layers with copied weights, post-LN
and pre-LN, cached decoding equal to teacher forcing, causality, attention weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from qkv.layers.blocks import DecoderBlock, DecoderLayerState, EncoderBlock
from qkv.layers.feedforward import FeedForward
from qkv.layers.relative_positions import ALiBi, RotaryEmbedding
from qkv.models.base import select_state
from qkv.models.transformer_stack import load_torch_decoder_layer, load_torch_encoder_layer

D, H, FF = 16, 4, 32
# The tests marked cuda run on the GPU where there is one (``python -m pytest -m cuda``).
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


@pytest.mark.cuda
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_equals_torch_layer(norm_first, activation, bias):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(
        D,
        H,
        FF,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        bias=bias,
    ).to(DEVICE)
    block = EncoderBlock(
        D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first, bias=bias
    ).to(DEVICE)
    _randomize_norms(layer)  # PyTorch starts them at 1 and 0: make a dropped bias visible
    load_torch_encoder_layer(block, layer)
    x = torch.randn(3, 6, D, device=DEVICE)
    keep = _padding([6, 4, 1], 6).to(DEVICE)
    ours = block(x, mask=keep).hidden
    theirs = layer(x, src_key_padding_mask=~keep[:, 0, 0])  # PyTorch: True = ignore
    real = keep[:, 0, 0]
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_torch_layer(norm_first, bias):
    torch.manual_seed(2)
    layer = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first, bias=bias
    ).to(DEVICE)
    block = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first, bias=bias).to(DEVICE)
    _randomize_norms(layer)
    load_torch_decoder_layer(block, layer)
    x, memory = torch.randn(2, 5, D, device=DEVICE), torch.randn(2, 7, D, device=DEVICE)
    keep = _padding([7, 3], 7).to(DEVICE)
    ours = block(x, memory, memory_mask=keep).hidden
    causal = nn.Transformer.generate_square_subsequent_mask(5, device=DEVICE)
    theirs = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=~keep[:, 0, 0])
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def _randomize_norms(layer: nn.Module) -> None:
    with torch.no_grad():
        for module in layer.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                if module.bias is not None:
                    module.bias.uniform_(-0.5, 0.5)


@pytest.mark.parametrize("kind", [EncoderBlock, DecoderBlock])
def test_bias_false_drops_every_bias_as_pytorch_does(kind):
    block = kind(D, H, FF, bias=False)
    assert not [name for name, _ in block.named_parameters() if name.endswith("bias")]
    torch_kind = nn.TransformerEncoderLayer if kind is EncoderBlock else nn.TransformerDecoderLayer
    theirs = torch_kind(D, H, FF, batch_first=True, bias=False)
    ours_count = sum(p.numel() for p in block.parameters())
    assert ours_count == sum(p.numel() for p in theirs.parameters())
    with_bias = kind(D, H, FF)
    norms = [name for name, _ in with_bias.named_parameters() if "norm.bias" in name]
    assert len(norms) == (3 if kind is DecoderBlock else 2)


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


@pytest.mark.cuda
@pytest.mark.parametrize("positions", [None, "rope", "alibi"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_with_cache_equals_teacher_forcing(norm_first, positions):
    torch.manual_seed(5)
    inside = {None: None, "rope": RotaryEmbedding(D // H), "alibi": ALiBi(H)}[positions]
    block = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first, positions=inside)
    block = block.to(DEVICE).eval()
    x, memory = torch.randn(2, 6, D, device=DEVICE), torch.randn(2, 4, D, device=DEVICE)
    keep = _padding([4, 2], 4).to(DEVICE)
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


@pytest.mark.parametrize("positions", [None, "rope", "alibi"])
def test_decoder_block_is_causal(positions):
    torch.manual_seed(6)
    inside = {None: None, "rope": RotaryEmbedding(D // H), "alibi": ALiBi(H)}[positions]
    block = DecoderBlock(D, H, FF, dropout=0.0, positions=inside)
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


@pytest.mark.parametrize("inside", [RotaryEmbedding(D // H), ALiBi(H)], ids=["rope", "alibi"])
def test_attention_positions_make_the_encoder_block_see_order(inside):
    """Without positions an encoder block is permutation-equivariant; RoPE or ALiBi inside its
    self-attention breaks that, with the same parameters (they have none of their own)."""
    torch.manual_seed(8)
    plain = EncoderBlock(D, H, FF, dropout=0.0).eval()
    placed = EncoderBlock(D, H, FF, dropout=0.0, positions=inside).eval()
    placed.load_state_dict(plain.state_dict())  # same keys: positions add no state
    x, order = torch.randn(2, 6, D), torch.tensor([3, 0, 5, 1, 4, 2])
    torch.testing.assert_close(plain(x[:, order]).hidden, plain(x).hidden[:, order])
    assert (placed(x[:, order]).hidden - placed(x).hidden[:, order]).abs().max() > 1e-3
    assert placed.self_attention.positions is inside


def test_parameter_names_and_order_are_those_checkpoints_were_saved_with():
    """Weights load by name, optimizer state by parameter order: both are part of the format."""

    def sublayer(name, *parts):
        return [f"{name}.{part}.{kind}" for part in parts for kind in ("weight", "bias")]

    def attention(name):  # W_Q, W_K, W_V stacked (as nn.MultiheadAttention), then out_proj
        return [f"{name}.in_proj_weight", f"{name}.in_proj_bias"] + sublayer(name, "out_proj")

    norm = ["{}_norm.weight", "{}_norm.bias"]
    feed_forward = sublayer("feed_forward", "expand", "contract") + [
        n.format("feed_forward") for n in norm
    ]
    self_attention = attention("self_attention") + [n.format("self_attention") for n in norm]
    cross_attention = attention("cross_attention") + [n.format("cross_attention") for n in norm]
    encoder = [name for name, _ in EncoderBlock(D, H, FF).named_parameters()]
    decoder = [name for name, _ in DecoderBlock(D, H, FF).named_parameters()]
    assert encoder == self_attention + feed_forward
    assert decoder == self_attention + cross_attention + feed_forward
