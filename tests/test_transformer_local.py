"""TransformerConfig(encoder_window=R): local encoder self-attention on the flex kernel."""

import dataclasses

import pytest
import torch

from qkv.errors import InputError
from qkv.functional import padding_mask
from qkv.models import Transformer, TransformerConfig

VOCAB = 30


def tiny(positions="sinusoidal", **fields):
    torch.manual_seed(0)
    config = TransformerConfig.small(
        VOCAB, d_model=16, num_heads=2, d_ff=32, positions=positions, max_len=400, **fields
    )
    return Transformer(config).eval()


def padded_source(lengths=(300, 211)):
    generator = torch.Generator().manual_seed(3)
    source = torch.randint(4, VOCAB, (len(lengths), max(lengths)), generator=generator)
    for row, length in enumerate(lengths):
        source[row, length:] = 0  # pad_id
    return source


def reference_memory(model, source, radius):
    """The encoder of the same weights without the option, given the dense local mask."""
    plain = Transformer(dataclasses.replace(model.config, encoder_window=None)).eval()
    plain.load_state_dict(model.state_dict())  # the same parameters: nothing added
    positions = torch.arange(source.shape[1])
    near = (positions[:, None] - positions).abs() <= radius  # (S, S)
    x = plain.source_positions(plain.source_embedding(source) * plain.embedding_scale)
    return plain.encoder(x, mask=padding_mask(source, 0) & near).hidden


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "alibi"])
def test_local_encoder_equals_the_dense_local_mask(positions):
    model = tiny(positions, encoder_window=20)
    source = padded_source()  # S = 300: three blocks of 128, most tiles skipped
    expected = reference_memory(model, source, 20)
    torch.testing.assert_close(model.encode(source).memory, expected, rtol=1e-5, atol=1e-5)
    dense = model.encode(source, need_weights=True)  # the weights need the dense mask
    torch.testing.assert_close(dense.memory, expected, rtol=1e-5, atol=1e-5)
    weights = dense.attention[0]  # (B, H, S, S)
    far = (torch.arange(300)[:, None] - torch.arange(300)).abs() > 20
    assert torch.all(weights[:, :, far] == 0)


def test_a_local_encoder_trains_and_decodes():
    model = tiny("rope", encoder_window=3).train()
    source, target = padded_source((40, 25)), padded_source((12, 9))
    loss = torch.nn.functional.cross_entropy(
        model(source, target[:, :-1]).logits.flatten(0, 1), target[:, 1:].flatten()
    )
    loss.backward()
    grad = model.encoder.layers[0].self_attention.in_proj_weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_old_checkpoints_load_unchanged():
    windowed, plain = tiny(encoder_window=8), tiny()
    assert windowed.state_dict().keys() == plain.state_dict().keys()
    saved = dataclasses.asdict(plain.config)
    del saved["encoder_window"]  # a config written before the field existed
    assert TransformerConfig(**saved).encoder_window is None
    source = padded_source((30, 20))
    before = plain.encode(source).memory
    again = Transformer(TransformerConfig(**saved)).eval()
    again.load_state_dict(plain.state_dict())
    torch.testing.assert_close(again.encode(source).memory, before, rtol=0, atol=0)


@pytest.mark.parametrize("window", [0, -1, 2.5, True])
def test_encoder_window_must_be_a_positive_int(window):
    with pytest.raises(InputError, match="encoder_window"):
        TransformerConfig.small(VOCAB, encoder_window=window)
