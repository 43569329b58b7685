"""The pieces of the Llama-family model: scaled RoPE, SwiGLU, sliding-window masks, and the
model's cached decoding (no transformers needed)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.decoding import sample
from qkv.errors import InputError
from qkv.functional import causal_mask
from qkv.functional.rope_scaling import RopeScaling, rope_inverse_frequency
from qkv.layers import RotaryEmbedding
from qkv.layers.gated_feedforward import GatedFeedForward
from qkv.layers.scaled_rotary import ScaledRotaryEmbedding
from qkv.models import llama
from qkv.models.lm_masks import attention_masks

SCALINGS = [
    RopeScaling(),
    RopeScaling("linear", factor=4.0),
    RopeScaling("dynamic", factor=2.0, original_max_len=8),
    RopeScaling("llama3", factor=8.0, original_max_len=64),
]


def test_unscaled_rope_equals_qkvs_plain_rotary_embedding():
    x = torch.randn(2, 3, 40, 16, dtype=torch.float64)
    plain, scaled = RotaryEmbedding(16, max_len=16), ScaledRotaryEmbedding(16, max_len=16)
    for start in (0, 5, 30):  # inside and past the stored tables
        torch.testing.assert_close(scaled.rotate(x, start=start), plain.rotate(x, start=start))
        torch.testing.assert_close(
            scaled.rotate(x.float(), start=start), plain.rotate(x.float(), start=start)
        )


@settings(max_examples=25, deadline=None)
@given(
    scaling=st.sampled_from([s for s in SCALINGS if not s.depends_on_length]),
    i=st.integers(0, 50),
    j=st.integers(0, 50),
    shift=st.integers(0, 50),
)
def test_scaled_rope_scores_depend_only_on_the_distance(scaling, i, j, shift):
    rope = ScaledRotaryEmbedding(8, base=500.0, scaling=scaling, max_len=32)
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, 8, dtype=torch.float64, generator=generator)

    def score(m, n):
        return (rope.rotate(q, start=m) * rope.rotate(k, start=n)).sum()

    torch.testing.assert_close(score(i, j), score(i + shift, j + shift))


def test_dynamic_frequencies_stretch_only_past_the_original_length():
    plain = rope_inverse_frequency(16, base=100.0)
    dynamic = RopeScaling("dynamic", factor=2.0, original_max_len=8)
    assert torch.equal(rope_inverse_frequency(16, base=100.0, scaling=dynamic, length=8), plain)
    longer = rope_inverse_frequency(16, base=100.0, scaling=dynamic, length=32)
    assert longer[0] == plain[0] and torch.all(longer[1:] < plain[1:])  # slower rotations
    rope = ScaledRotaryEmbedding(16, base=100.0, scaling=dynamic, max_len=64)
    x = torch.randn(1, 1, 4, 16, dtype=torch.float64)
    # keys at positions 28..31 read in a call ending at 32 rotate with the length-32 base
    expected = ScaledRotaryEmbedding(16, base=100.0 * (2 * 32 / 8 - 1) ** (16 / 14))
    torch.testing.assert_close(rope.rotate(x, start=28), expected.rotate(x, start=28))


def test_unsupported_scaling_is_a_clear_error():
    with pytest.raises(InputError, match=r"'yarn' is not supported; supported: \['default'"):
        RopeScaling("yarn")
    with pytest.raises(InputError, match="original_max_len"):
        RopeScaling("llama3", factor=8.0)


def test_swiglu_is_silu_gate_times_up_projected_down():
    layer = GatedFeedForward(6, 10)
    x = torch.randn(2, 3, 6)
    w = layer.gate.weight, layer.expand.weight, layer.contract.weight
    expected = (F.silu(x @ w[0].T) * (x @ w[1].T)) @ w[2].T
    torch.testing.assert_close(layer(x), expected)


@settings(max_examples=30, deadline=None)
@given(query_len=st.integers(1, 9), extra=st.integers(0, 9), window=st.integers(1, 12))
def test_the_dense_window_mask_is_causal_within_the_window(query_len, extra, window):
    key_len = query_len + extra
    mask, block_mask = attention_masks(
        length=query_len,
        offset=extra,
        first=0,
        window=window,
        documents=None,
        device=torch.device("cpu"),
        dense=True,
    )
    assert block_mask is None
    mask = mask[0, 0]
    for row in range(query_len):
        position = row + extra
        for key in range(key_len):
            assert mask[row, key] == (0 <= position - key < window)
    if window >= key_len:
        assert torch.equal(mask, causal_mask(query_len, key_len))


@pytest.mark.parametrize("window, layers", [(None, None), (3, None), (4, (1,))])
def test_cached_decoding_equals_full_forward_passes(window, layers):
    torch.manual_seed(0)
    model = llama(
        50,
        d_model=16,
        num_heads=4,
        num_kv_heads=2,
        num_layers=2,
        d_ff=24,
        max_len=64,
        dropout=0.0,
        window=window,
        window_layers=layers,
        rope_scaling=RopeScaling("llama3", factor=4.0, original_max_len=16),
    ).eval()
    prompt = torch.randint(0, 50, (2, 6))
    cached = sample(model, prompt, max_new_tokens=12, temperature=0)
    assert torch.equal(
        cached, sample(model, prompt, max_new_tokens=12, temperature=0, use_cache=False)
    )
    ids = cached[:, :-1]
    state = model.start(ids[:, :8])
    steps = [model.step(ids[:, t], state).log_probs for t in range(8, ids.shape[1])]
    full = F.log_softmax(model(ids).logits[:, 8:].float(), dim=-1)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=0, atol=1e-5)


def test_a_windowed_llama_runs_its_windows_on_the_flex_kernel(monkeypatch):
    """Mistral's and Qwen2's windows are block masks (the blocks outside are skipped), never
    a dense boolean mask; the full layers stay plain causal."""
    import qkv.layers.lm_block as lm_block

    seen = []
    forward = lm_block.LMBlock.forward

    def spy(self, x, **kwargs):
        seen.append((kwargs["block_mask"] is not None, kwargs["mask"] is not None))
        return forward(self, x, **kwargs)

    monkeypatch.setattr(lm_block.LMBlock, "forward", spy)
    model = llama(50, d_model=16, num_heads=4, num_layers=3, window=5, window_layers=(0, 1))
    model(torch.randint(0, 50, (1, 300)))
    assert seen == [(True, False), (True, False), (False, False)]
