"""The ready-made patterns of qkv.functional.patterns: each mask against its equation
written densely, each score function against its dense bias, and combinations, through
flex_attention (outputs and gradients, captured tensors included)."""

import pytest
import torch

from qkv.errors import QkvError
from qkv.functional import alibi_bias, alibi_slopes, and_masks, flex_attention, or_masks
from qkv.functional import patterns as P

from .test_flex import assert_same, inputs

T = 37
i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
IDS = torch.tensor([0] * 9 + [1] * 15 + [2] * 13)

DENSE = {
    "causal": (P.causal, j <= i),
    "sliding_window": (P.sliding_window(6), (i - j >= 0) & (i - j < 6)),
    "document": (P.document(IDS), IDS[:, None] == IDS[None, :]),
    "prefix_lm": (P.prefix_lm(7), (j < 7) | (j <= i)),
    "global_tokens": (P.global_tokens(2), (i < 2) | (j < 2)),
    "longformer": (P.global_tokens(2, window=4), (i < 2) | (j < 2) | ((i - j).abs() <= 4)),
    "dilated": (P.dilated(4, 3), (i - j >= 0) & (i - j < 12) & ((i - j) % 3 == 0)),
}


@pytest.mark.parametrize("name", DENSE)
def test_each_mask_equals_its_equation(name):
    mask_mod, dense = DENSE[name]
    assert_same(*inputs(), mask_mod=mask_mod, dense=dense.expand(2, 4, T, T), block=8)


def test_combinations():
    causal_documents = and_masks(P.causal, P.document(IDS))
    assert_same(
        *inputs(), mask_mod=causal_documents, dense=(j <= i) & (IDS[:, None] == IDS[None, :])
    )
    local_or_prefix = or_masks(P.sliding_window(3), P.prefix_lm(4))
    assert_same(
        *inputs(),
        mask_mod=local_or_prefix,
        dense=((i - j >= 0) & (i - j < 3)) | (j < 4) | (j <= i),
        block=(5, 7),
    )


def test_alibi_score_equals_the_alibi_bias():
    slopes = alibi_slopes(4, dtype=torch.float64)
    bias = alibi_bias(4, T, T, slopes=slopes)
    assert_same(*inputs(), score_mod=P.alibi(slopes), bias=bias, mask_mod=P.causal)
    q, k, v = inputs(tq=10, tk=T)  # end-aligned queries, as alibi_bias places them
    bias = alibi_bias(4, 10, T, slopes=slopes)
    shifted = lambda b, h, qi, kv: kv <= qi + T - 10  # noqa: E731
    assert_same(q, k, v, score_mod=P.alibi(slopes, query_start=T - 10), bias=bias, mask_mod=shifted)


def test_softcap_equals_capping_the_dense_scores():
    q, k, v = inputs()
    scores = q @ k.transpose(-2, -1) / 8**0.5
    out = flex_attention(q, k, v, score_mod=P.softcap(0.5))
    want = torch.softmax(torch.tanh(scores / 0.5) * 0.5, -1) @ v
    torch.testing.assert_close(out, want)
    g = torch.randn_like(out)
    torch.testing.assert_close(
        torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(want, (q, k, v), g)
    )
    assert scores.abs().max() > 0.5  # the cap changes some scores


def test_relative_bias_table_gets_its_gradient():
    table = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    offset = (j - i).clamp(-4, 4) + 4
    bias = table[:, offset][None]  # (1, H, T, T)
    assert_same(
        *inputs(),
        score_mod=P.relative_bias(table),
        bias=bias,
        captured=(table,),
        mask_mod=P.sliding_window(9),
    )


def test_score_on_a_learned_module_parameter():
    layer = torch.nn.Linear(1, 4).double()

    def per_head_scale(score, b, h, qi, kv):
        return score * layer.weight[h, 0] + layer.bias[h]

    q, k, v = inputs()
    out = flex_attention(q, k, v, score_mod=per_head_scale)
    scores = q @ k.transpose(-2, -1) / 8**0.5
    want = (
        torch.softmax(scores * layer.weight[:, 0, None, None] + layer.bias[:, None, None], -1) @ v
    )
    torch.testing.assert_close(out, want)
    g = torch.randn_like(out)
    params = (layer.weight, layer.bias)
    torch.testing.assert_close(
        torch.autograd.grad(out, params, g), torch.autograd.grad(want, params, g)
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: P.sliding_window(0),
        lambda: P.dilated(3, 0),
        lambda: P.prefix_lm(-1),
        lambda: P.global_tokens(2, window=0),
        lambda: P.document(torch.zeros(3, 4, 5, dtype=torch.long)),
        lambda: P.softcap(0),
        lambda: P.relative_bias(torch.zeros(4, 8)),
        lambda: P.alibi(torch.zeros(2, 2)),
    ],
)
def test_bad_pattern_arguments(make):
    with pytest.raises(QkvError):
        make()
