"""Position information (SPEC section 4): sinusoidal, learned, RoPE, ALiBi."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import qkv
from qkv.functional.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    rotary_angles,
    sinusoidal_encoding,
)
from qkv.layers import position_registry
from qkv.layers.attention_positions import AttentionPositions
from qkv.layers.position_registry import (
    ATTENTION,
    INPUT,
    available_positions,
    build_attention_positions,
    build_input_positions,
    build_position,
    register_position,
)
from qkv.layers.positions import (
    ALiBi,
    ConcatenatedPositionalEmbedding,
    LearnedPositionalEmbedding,
    NoInputPositions,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

FEW = settings(max_examples=25, deadline=None)


# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_hand_values():
    pe = sinusoidal_encoding(3, 4, dtype=torch.float64)
    assert pe.shape == (3, 4)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64))
    # frequencies 1 / 10000^(0/4) = 1 and 1 / 10000^(2/4) = 1/100
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    torch.testing.assert_close(pe[1], torch.tensor(expected, dtype=torch.float64))
    assert pe[2, 2].item() == pytest.approx(math.sin(0.02))


def test_sinusoidal_odd_dim_offset_and_long_lengths():
    pe = sinusoidal_encoding(5, 5, dtype=torch.float64)
    assert pe.shape == (5, 5)
    assert pe[3, 4].item() == pytest.approx(math.sin(3 / 10000 ** (4 / 5)))  # last column: a sine
    torch.testing.assert_close(sinusoidal_encoding(5, 6, offset=7), sinusoidal_encoding(12, 6)[7:])
    # extends to any length: every row distinct, values bounded
    long = sinusoidal_encoding(20000, 8)
    assert long.abs().max() <= 1.0
    assert torch.unique(long, dim=0).shape[0] == 20000


@FEW
@given(
    half_dim=st.integers(1, 6),
    shift=st.integers(0, 50),
    positions=st.lists(st.integers(0, 500), min_size=1, max_size=8),
)
def test_sinusoidal_shift_is_a_fixed_rotation_per_frequency(half_dim, shift, positions):
    """PE(pos + k) = M_k PE(pos), M_k block-diagonal 2x2 rotations depending on k alone."""
    dim = 2 * half_dim
    frequencies = 1.0 / 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = shift * frequencies
    rotation = torch.zeros(dim, dim, dtype=torch.float64)
    rotation[0::2, 0::2] = torch.diag(torch.cos(angle))
    rotation[0::2, 1::2] = torch.diag(torch.sin(angle))
    rotation[1::2, 0::2] = torch.diag(-torch.sin(angle))
    rotation[1::2, 1::2] = torch.diag(torch.cos(angle))
    table = sinusoidal_encoding(600, dim, dtype=torch.float64)
    index = torch.tensor(positions)
    torch.testing.assert_close(table[index + shift], table[index] @ rotation.T)


def test_sinusoidal_layer_offset_cache_and_no_state():
    torch.manual_seed(0)
    layer = SinusoidalPositionalEncoding(6, max_len=8)
    uncached = SinusoidalPositionalEncoding(6, max_len=None)
    assert list(layer.parameters()) == [] and layer.state_dict() == {}
    x = torch.randn(2, 12, 6)
    full = layer(x)  # longer than the cache: computed on the fly
    torch.testing.assert_close(full, x + sinusoidal_encoding(12, 6))
    torch.testing.assert_close(uncached(x), full)
    for t in range(12):  # incremental decoding, inside and past the cache
        torch.testing.assert_close(layer(x[:, t : t + 1], offset=t), full[:, t : t + 1])
    assert layer.encoding.shape == (8, 6)  # forward did not grow the cache
    with pytest.raises(ValueError, match="d_model=6"):
        layer(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="offset"):
        layer(x, offset=-1)


# ---------------------------------------------------------------- learned


@pytest.mark.parametrize("mode, position_dim", [("add", None), ("concat", None), ("concat", 3)])
def test_learned_shapes_and_gradients(mode, position_dim):
    torch.manual_seed(0)
    if mode == "add":
        layer = LearnedPositionalEmbedding(10, 8)
    else:
        layer = ConcatenatedPositionalEmbedding(10, 8, position_dim=position_dim)
    x = torch.randn(3, 4, 8, requires_grad=True)
    out = layer(x, offset=2)
    assert out.shape == (3, 4, 8)
    out.square().sum().backward()
    grad = layer.embedding.weight.grad
    assert grad.shape == (10, position_dim or 8)
    assert grad[2:6].abs().sum(dim=1).gt(0).all()  # positions 2..5 were used
    assert grad[:2].eq(0).all() and grad[6:].eq(0).all()
    assert x.grad is not None and x.grad.abs().sum() > 0
    if mode == "add":
        torch.testing.assert_close(out, x + layer.embedding.weight[2:6])
    else:
        assert layer.projection.weight.grad.abs().sum() > 0


def test_learned_too_long_and_bad_arguments():
    layer = LearnedPositionalEmbedding(5, 4)
    layer(torch.randn(1, 5, 4))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"length 6.*max_len=5.*raise max_len.*Sinusoidal"):
        layer(torch.randn(1, 6, 4))
    with pytest.raises(ValueError, match="offset 3"):
        layer(torch.randn(1, 3, 4), offset=3)
    with pytest.raises(ValueError, match="d_model=4"):
        layer(torch.randn(1, 3, 5))
    with pytest.raises(ValueError, match="max_len=0"):
        LearnedPositionalEmbedding(0, 4)
    with pytest.raises(ValueError, match="position_dim=0"):
        ConcatenatedPositionalEmbedding(5, 4, position_dim=0)
    concat = ConcatenatedPositionalEmbedding(5, 4)
    with pytest.raises(ValueError, match=r"length 6.*max_len=5"):
        concat(torch.randn(1, 6, 4))


# ---------------------------------------------------------------- RoPE


def _rotate_by_hand(x: torch.Tensor, positions: list[int], base: float = 10000.0) -> torch.Tensor:
    """Half-split RoPE as complex multiplication: (x_i + i x_{i+Dh/2}) * e^{i p theta_i}."""
    half = x.shape[-1] // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    angles = torch.tensor(positions, dtype=torch.float64)[:, None] * theta  # (T, Dh/2)
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([z.real, z.imag], dim=-1)


def test_rope_matches_complex_rotation_and_keeps_norms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    cos, sin = rotary_angles(5, 8, offset=4, dtype=torch.float64)
    rotated = apply_rotary(x, cos, sin)
    torch.testing.assert_close(rotated, _rotate_by_hand(x, [4, 5, 6, 7, 8]))
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    # per-sequence positions (B, T): each row rotated by its own positions
    positions = torch.tensor([[0, 1, 2, 3, 4], [9, 3, 0, 7, 2]])
    cos_b, sin_b = rotary_angles(positions, 8, dtype=torch.float64)
    rotated_b = apply_rotary(x, cos_b, sin_b)
    torch.testing.assert_close(rotated_b[1], _rotate_by_hand(x[1], [9, 3, 0, 7, 2]))


@FEW
@given(
    m=st.integers(0, 200),
    n=st.integers(0, 200),
    shift=st.integers(0, 1000),
    half_dim=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_rope_scores_depend_only_on_relative_position(m, n, shift, half_dim, seed):
    generator = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 1, 1, 2 * half_dim, generator=generator, dtype=torch.float64)

    def score(query_pos: int, key_pos: int) -> torch.Tensor:
        q_cos, q_sin = rotary_angles(torch.tensor([query_pos]), 2 * half_dim, dtype=torch.float64)
        k_cos, k_sin = rotary_angles(torch.tensor([key_pos]), 2 * half_dim, dtype=torch.float64)
        return (apply_rotary(q, q_cos, q_sin) * apply_rotary(k, k_cos, k_sin)).sum()

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift))


def test_rope_offset_consistency_and_cached_decoding():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    q, k = torch.randn(2, 2, 3, 6, 8)
    q_all, k_all = rope(q, k)
    for t in range(6):  # one token at a time, offset = its position
        q_t, k_t = rope(q[:, :, t : t + 1], k[:, :, t : t + 1], offset=t)
        torch.testing.assert_close(q_t, q_all[:, :, t : t + 1])
        torch.testing.assert_close(k_t, k_all[:, :, t : t + 1])
    # a shorter query is end-aligned: it takes the last positions of the keys
    q_last, k_same = rope(q[:, :, -2:], k)
    torch.testing.assert_close(q_last, q_all[:, :, -2:])
    torch.testing.assert_close(k_same, k_all)
    # the functional tables agree with the layer
    cos, sin = rotary_angles(6, 8)
    torch.testing.assert_close(apply_rotary(q, cos, sin), q_all)


def test_rope_validation():
    with pytest.raises(ValueError, match="head_dim=7"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="even"):
        apply_rotary(torch.randn(1, 1, 2, 5), *rotary_angles(2, 4))
    with pytest.raises(ValueError, match=r"\(B, H, T, Dh\)"):
        apply_rotary(torch.randn(2, 4), *rotary_angles(2, 4))
    with pytest.raises(ValueError, match="do not fit"):
        apply_rotary(torch.randn(1, 1, 3, 4), *rotary_angles(2, 4))
    rope = RotaryEmbedding(4)
    with pytest.raises(ValueError, match="head_dim = 4"):
        rope(torch.randn(1, 1, 2, 6), torch.randn(1, 1, 2, 6))
    with pytest.raises(ValueError, match="query length 3"):
        rope(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 2, 4))


def test_apply_rotary_gradcheck():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    cos, sin = rotary_angles(3, 4, offset=2, dtype=torch.float64)
    cos.requires_grad_(True)
    sin.requires_grad_(True)
    assert torch.autograd.gradcheck(apply_rotary, (x, cos, sin))


# ---------------------------------------------------------------- ALiBi


def test_alibi_slopes():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]
    assert alibi_slopes(4).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    # not a power of two: the 4-head slopes, then every other slope of 8 heads
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert alibi_slopes(1).tolist() == [2.0**-8]


def test_alibi_bias_hand_checked_and_end_aligned():
    bias = alibi_bias(2, 3, 3)
    distance = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    assert bias.shape == (1, 2, 3, 3)
    torch.testing.assert_close(bias[0, 0], -distance / 16)
    torch.testing.assert_close(bias[0, 1], -distance / 256)
    # Tq < Tk: the 2 queries sit at positions 2 and 3 of 4
    short = alibi_bias(2, 2, 4)
    torch.testing.assert_close(short[0, 0], -torch.tensor([[2.0, 1, 0, 1], [3, 2, 1, 0]]) / 16)
    torch.testing.assert_close(short, alibi_bias(2, 4, 4)[:, :, 2:])
    with pytest.raises(ValueError, match="key_len >= query_len"):
        alibi_bias(2, 4, 3)
    with pytest.raises(ValueError, match="num_heads=2"):
        alibi_bias(2, 3, 3, slopes=torch.ones(3))


def test_alibi_layer_with_attention_matches_explicit_softmax():
    torch.manual_seed(0)
    layer = ALiBi(4).double()
    assert layer.state_dict() == {} and layer.slopes.dtype == torch.float64
    q, k, v = torch.randn(3, 2, 4, 5, 8, dtype=torch.float64)
    bias = layer(5, 5)
    torch.testing.assert_close(bias, alibi_bias(4, 5, 5, dtype=torch.float64))
    out = qkv.attention(q, k, v, mask=bias, causal=True).output
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(out, scores.softmax(-1) @ v)
    # cached decoding: the last query alone, with the end-aligned bias, gives the last row
    last = qkv.attention(q[:, :, -1:], k, v, mask=layer(1, 5), causal=True).output
    torch.testing.assert_close(last, out[:, :, -1:])


# ---------------------------------------------------------------- permutation equivariance


def _self_attention(x, weights, rope=None):
    """Single-head self-attention on (B, T, D): Q = X W_q, K = X W_k, V = X W_v."""
    q, k, v = (x @ w for w in weights)
    q, k, v = q[:, None], k[:, None], v[:, None]  # (B, 1, T, D)
    if rope is not None:
        q, k = rope(q, k)
    return qkv.attention(q, k, v).output[:, 0]  # (B, T, D)


@FEW
@given(data=st.data(), length=st.integers(2, 7), width=st.sampled_from([4, 8]))
def test_self_attention_permutation_equivariance_and_positions_break_it(data, length, width):
    perm = torch.tensor(data.draw(st.permutations(list(range(length)))))
    seed = data.draw(st.integers(0, 2**16))
    torch.manual_seed(seed)
    x = torch.randn(2, length, width, dtype=torch.float64)
    weights = [torch.randn(width, width, dtype=torch.float64) / width**0.5 for _ in range(3)]

    # without positions: permuting the inputs permutes the outputs the same way
    out = _self_attention(x, weights)
    torch.testing.assert_close(_self_attention(x[:, perm], weights), out[:, perm])

    assume(not torch.equal(perm, torch.arange(length)))
    sinusoidal = SinusoidalPositionalEncoding(width).double()
    learned = LearnedPositionalEmbedding(length, width).double()
    torch.nn.init.normal_(learned.embedding.weight)  # unit scale, to see the effect clearly
    for add_positions in (sinusoidal, learned):
        out = _self_attention(add_positions(x), weights)
        permuted = _self_attention(add_positions(x[:, perm]), weights)
        assert (permuted - out[:, perm]).abs().max() > 1e-3
    rope = RotaryEmbedding(width).double()
    out = _self_attention(x, weights, rope)
    permuted = _self_attention(x[:, perm], weights, rope)
    assert (permuted - out[:, perm]).abs().max() > 1e-3


# ---------------------------------------------------------------- attention position components


def test_rope_and_alibi_are_attention_position_components():
    rope, alibi = RotaryEmbedding(8), ALiBi(4)
    assert isinstance(rope, AttentionPositions) and isinstance(alibi, AttentionPositions)
    x = torch.randn(2, 4, 5, 8)
    assert torch.equal(alibi.rotate(x, start=3), x)
    no_bias = rope.bias(
        query_start=0, num_queries=5, num_keys=5, device=x.device, dtype=torch.float32
    )
    assert no_bias is None
    assert rope.state_dict() == {} and alibi.state_dict() == {}


def test_rope_rotate_places_vectors_at_their_positions():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8).double()
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(rope.rotate(x, start=4), _rotate_by_hand(x, [4, 5, 6, 7, 8]))
    whole = rope.rotate(x, start=0)
    for t in range(5):  # one position at a time, as a cached decoder calls it
        torch.testing.assert_close(rope.rotate(x[:, :, t : t + 1], start=t), whole[:, :, t : t + 1])
    # the two-argument call is the same rotation, queries end-aligned
    q_rot, k_rot = rope(x[:, :, 3:], x, offset=2)
    torch.testing.assert_close(k_rot, rope.rotate(x, start=2))
    torch.testing.assert_close(q_rot, rope.rotate(x[:, :, 3:], start=5))
    with pytest.raises(ValueError, match="start=-1"):
        rope.rotate(x, start=-1)
    with pytest.raises(ValueError, match="head_dim = 8"):
        rope.rotate(torch.randn(2, 3, 5, 6), start=0)


@FEW
@given(
    query_pos=st.integers(0, 300),
    key_pos=st.integers(0, 300),
    shift=st.integers(1, 2000),
    head_dim=st.sampled_from([2, 4, 8, 16]),
    seed=st.integers(0, 2**16),
)
def test_rope_component_scores_depend_only_on_i_minus_j(query_pos, key_pos, shift, head_dim, seed):
    """q_i . k_j after RotaryEmbedding.rotate equals q_{i+s} . k_{j+s}, for any shift s."""
    generator = torch.Generator().manual_seed(seed)
    rope = RotaryEmbedding(head_dim).double()
    q, k = torch.randn(2, 1, 1, 1, head_dim, generator=generator, dtype=torch.float64)

    def score(i: int, j: int) -> torch.Tensor:
        return (rope.rotate(q, start=i) * rope.rotate(k, start=j)).sum()

    torch.testing.assert_close(score(query_pos, key_pos), score(query_pos + shift, key_pos + shift))
    # a score matrix of whole sequences: constant along every diagonal (Toeplitz)
    seq_q = torch.randn(1, 1, 6, head_dim, generator=generator, dtype=torch.float64)
    same = seq_q[:, :, :1].expand(1, 1, 6, head_dim)  # one vector at every position
    scores = rope.rotate(same, start=query_pos) @ rope.rotate(same, start=query_pos).transpose(
        -2, -1
    )
    for offset in range(-5, 6):
        diagonal = scores[0, 0].diagonal(offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_alibi_slopes_published_values_for_non_powers_of_two():
    """Press et al.: the slopes of the next lower power of two, then every other slope of the
    next higher one.  12 heads: 2^-1 .. 2^-8, then the 16-head slopes 2^-0.5, 2^-1.5, ..."""
    expected_12 = [2.0**-i for i in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(
        alibi_slopes(12, dtype=torch.float64), torch.tensor(expected_12, dtype=torch.float64)
    )
    assert alibi_slopes(3).tolist() == [2.0**-4, 2.0**-8, 2.0**-2]
    assert alibi_slopes(5).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1]
    assert ALiBi(8).slopes.tolist() == [
        1 / 2,
        1 / 4,
        1 / 8,
        1 / 16,
        1 / 32,
        1 / 64,
        1 / 128,
        1 / 256,
    ]
    for heads in range(1, 40):  # always distinct, in (0, 1)
        slopes = alibi_slopes(heads, dtype=torch.float64)
        assert slopes.unique().numel() == heads and slopes.gt(0).all() and slopes.lt(1).all()


def test_alibi_component_bias_hand_checked():
    alibi = ALiBi(2)
    full = alibi.bias(
        query_start=0, num_queries=3, num_keys=3, device=torch.device("cpu"), dtype=torch.float64
    )
    assert full.shape == (2, 3, 3) and full.dtype == torch.float64
    # causal rows (j <= i): the paper's -slope * (i - j); above the diagonal: symmetric
    distance = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=torch.float64)
    torch.testing.assert_close(full[0], -distance / 16)
    torch.testing.assert_close(full[1], -distance / 256)
    # a cached step: the query at position 3 against keys 0..3 is the last row of the full bias
    step = alibi.bias(
        query_start=3, num_queries=1, num_keys=4, device=torch.device("cpu"), dtype=torch.float32
    )
    torch.testing.assert_close(step[0], -torch.tensor([[3.0, 2, 1, 0]]) / 16)
    torch.testing.assert_close(step, alibi(1, 4)[0])
    # half precision: distances computed in float32, cast at the end
    half = alibi.bias(
        query_start=0, num_queries=1, num_keys=3, device=torch.device("cpu"), dtype=torch.bfloat16
    )
    assert half.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="query_start=-2"):
        alibi.bias(
            query_start=-2,
            num_queries=1,
            num_keys=3,
            device=torch.device("cpu"),
            dtype=torch.float32,
        )


# ---------------------------------------------------------------- the registry


def test_registry_roles_and_components():
    assert available_positions() == ["alibi", "learned", "learned_concat", "rope", "sinusoidal"]
    assert available_positions(INPUT) == ["learned", "learned_concat", "sinusoidal"]
    assert available_positions(ATTENTION) == ["alibi", "rope"]
    dims = dict(d_model=16, num_heads=4, max_len=32, dropout=0.0)
    expected = {
        "sinusoidal": SinusoidalPositionalEncoding,
        "learned": LearnedPositionalEmbedding,
        "learned_concat": ConcatenatedPositionalEmbedding,
        "rope": RotaryEmbedding,
        "alibi": ALiBi,
    }
    for name, kind in expected.items():
        assert type(build_position(name, **dims)) is kind
    assert build_position("rope", **dims).head_dim == 4
    assert build_position("alibi", **dims).num_heads == 4
    assert build_position("learned", **dims).max_len == 32
    for name in available_positions(INPUT):
        assert type(build_input_positions(name, **dims)) is expected[name]
        assert build_attention_positions(name, d_model=16, num_heads=4) is None
    for name in available_positions(ATTENTION):
        passthrough = build_input_positions(name, **dims)
        assert isinstance(passthrough, NoInputPositions)
        x = torch.randn(2, 3, 16)
        assert torch.equal(passthrough(x, offset=5), x)
        assert isinstance(build_attention_positions(name, d_model=16, num_heads=4), expected[name])


def test_registry_errors_and_a_new_scheme():
    with pytest.raises(ValueError, match=r"unknown positions 'rotary'.*'rope'"):
        build_position("rotary", d_model=8)
    with pytest.raises(ValueError, match="role='inside'"):
        register_position("mine", lambda **_: torch.nn.Identity(), role="inside")
    with pytest.raises(ValueError, match="head_dim=3"):  # RoPE needs an even head width
        build_attention_positions("rope", d_model=12, num_heads=4)
    register_position(
        "scaled_sinusoidal", lambda *, d_model, **_: ScaledSinusoidal(d_model), role=INPUT
    )
    try:
        layer = build_input_positions("scaled_sinusoidal", d_model=4)
        x = torch.zeros(1, 2, 4)
        torch.testing.assert_close(layer(x), 0.5 * sinusoidal_encoding(2, 4)[None])
        assert "scaled_sinusoidal" in available_positions(INPUT)
    finally:
        unregister = position_registry._POSITIONS.pop  # keep the registry as the other tests see it
        unregister("scaled_sinusoidal")


class ScaledSinusoidal(torch.nn.Module):
    """A made-up input scheme for the registry test: half-strength sinusoidal encodings."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        return x + 0.5 * sinusoidal_encoding(x.shape[1], self.d_model, offset=offset)


def test_rope_cached_tables_equal_computed_ones_past_the_cache_too():
    torch.manual_seed(0)
    short, none = RotaryEmbedding(8, max_len=4), RotaryEmbedding(8, max_len=None)
    assert short.state_dict() == {} and short.cos_table.shape == (4, 8)
    x = torch.randn(2, 3, 10, 8)
    torch.testing.assert_close(short.rotate(x, start=0), none.rotate(x, start=0))
    torch.testing.assert_close(
        short.rotate(x[:, :, 3:], start=3), none.rotate(x, start=0)[:, :, 3:]
    )
    half = x.to(torch.bfloat16)
    assert short.rotate(half, start=2).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="max_len=-1"):
        RotaryEmbedding(8, max_len=-1)


def _hand_attention(x, layer, *, causal, bias=None, rotate=None):
    """softmax(Q K^T / sqrt(Dh) + bias) V per head, written out, with the layer's weights."""
    heads, width = layer.num_heads, layer.head_dim
    batch, length, _ = x.shape

    def project(weight, bias):
        return F.linear(x, weight, bias).view(batch, length, heads, width).transpose(1, 2)

    q, k, v = (project(*projection) for projection in layer.projections())  # (B, H, T, Dh)
    if rotate is not None:
        q, k = rotate(q), rotate(k)
    scores = q @ k.transpose(-2, -1) / width**0.5  # (B, H, T, T)
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(torch.ones(length, length).triu(1).bool(), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, heads * width)
    return layer.out_proj(out)


@pytest.mark.parametrize("causal", [True, False])
def test_rope_and_alibi_inside_multi_head_attention_equal_the_written_equation(causal):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    distance = (torch.arange(6)[:, None] - torch.arange(6)[None, :]).abs().double()
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8], dtype=torch.float64)

    alibi_layer = qkv.MultiHeadAttention(16, 4, positions=ALiBi(4)).double()
    expected = _hand_attention(
        x, alibi_layer, causal=causal, bias=-slopes[:, None, None] * distance
    )
    torch.testing.assert_close(alibi_layer(x, causal=causal)[0], expected)

    rope_layer = qkv.MultiHeadAttention(16, 4, positions=RotaryEmbedding(4)).double()
    expected = _hand_attention(
        x, rope_layer, causal=causal, rotate=lambda t: _rotate_by_hand(t, list(range(6)))
    )
    torch.testing.assert_close(rope_layer(x, causal=causal)[0], expected)
