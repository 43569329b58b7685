"""Every tensor requiring grad that a score_mod reads gets its exact gradient, however the
function reaches it -- or a clear error naming the function, never silently none."""

import dataclasses
import functools
import math
import types

import pytest
import torch
from torch import nn

from qkv.functional import create_block_mask, flex_attention
from qkv.functional import patterns as P
from qkv.functional.captures import CaptureError, captured_tensors

B, H, T, D = 2, 2, 19, 4


def qkv_inputs(dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, T, D, generator=gen, dtype=dtype).requires_grad_() for _ in range(3)]


def dense_reference(q, k, v, score_mod, mask_mod=None):
    """softmax(score_mod(q k^T / sqrt(D))) v on the whole grid, in one autograd graph."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    b, h = torch.arange(B).view(-1, 1, 1, 1), torch.arange(H).view(1, -1, 1, 1)
    i, j = torch.arange(T).view(1, 1, -1, 1), torch.arange(T).view(1, 1, 1, -1)
    scores = score_mod(scores, b, h, i, j).expand(B, H, T, T).to(q.dtype)
    if mask_mod is not None:
        scores = scores.masked_fill(~mask_mod(b, h, i, j), float("-inf"))
    return scores.softmax(-1) @ v


def assert_gradients(score_mod, learned, *, mask_mod=None, dtype=torch.float64):
    """Output and the gradients of q, k, v and of every ``learned`` tensor equal the dense
    reference's (float64 unless said)."""
    q, k, v = qkv_inputs(dtype)
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, None, None, T, T, BLOCK_SIZE=8)
    grad = torch.randn(B, H, T, D, dtype=dtype, generator=torch.Generator().manual_seed(1))
    tensors = (q, k, v, *learned)
    ours = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    ours_grads = torch.autograd.grad(
        (ours * grad).sum(), tensors, allow_unused=True, retain_graph=True
    )
    want = dense_reference(q, k, v, score_mod, mask_mod)
    want_grads = torch.autograd.grad((want * grad).sum(), tensors, allow_unused=True)
    tol = {} if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours, want, **tol)
    for n, (got, expected) in enumerate(zip(ours_grads, want_grads, strict=True)):
        if n >= 3:
            assert expected is not None and got is not None, "a learned tensor got no gradient"
        zero = torch.zeros_like(tensors[n])  # q and k unused where scores ignore them
        torch.testing.assert_close(
            zero if got is None else got, zero if expected is None else expected, **tol
        )


def table(dtype=torch.float64, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return (0.5 * torch.randn(H, T, T, generator=gen, dtype=dtype)).requires_grad_()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_table_reached_through_a_plain_objects_attribute(dtype):
    """The bug that stopped learned biases learning: ``config.table`` got no gradient."""
    config = types.SimpleNamespace(table=table(dtype))
    assert_gradients(lambda s, b, h, i, j: s + config.table[h, i, j], [config.table], dtype=dtype)


def test_tables_behind_a_dataclass_a_nested_config_a_dict_and_a_list():
    @dataclasses.dataclass
    class Bias:
        table: torch.Tensor
        scale: torch.Tensor

    bias = Bias(table(), torch.tensor(0.7, dtype=torch.float64, requires_grad=True))
    assert_gradients(
        lambda s, b, h, i, j: s * bias.scale + bias.table[h, i, j], [bias.table, bias.scale]
    )
    outer = types.SimpleNamespace(inner=types.SimpleNamespace(bias=bias))
    assert_gradients(lambda s, b, h, i, j: s + outer.inner.bias.table[h, i, j], [bias.table])
    by_name, listed = {"rel": table(seed=3)}, [table(seed=4), table(seed=5)]
    assert_gradients(
        lambda s, b, h, i, j: s + by_name["rel"][h, i, j] - listed[1][h, j, i],
        [by_name["rel"], listed[1]],
    )


def test_a_modules_parameter_a_bound_method_a_partial_and_a_derived_tensor():
    class RelativeBias(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(0.3 * torch.randn(H, 2 * T - 1, dtype=torch.float64))

        def forward(self, s, b, h, i, j):
            return s + self.weight[h, i - j + T - 1]

        def score(self, s, b, h, i, j):
            return self(s, b, h, i, j)

    module = RelativeBias()
    assert_gradients(module, [module.weight])  # the module itself as the score_mod
    assert_gradients(module.score, [module.weight])
    gain = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    assert_gradients(functools.partial(lambda g, s, b, h, i, j: s * g, gain), [gain])
    base = table()
    derived = base.tanh() * 2  # not a leaf: its gradient flows on into ``base``
    assert_gradients(lambda s, b, h, i, j: s + derived[h, i, j], [base])


GLOBAL_TABLE = table(seed=6)
table_by_attribute_name = table(seed=7)  # noqa: N816  shares a name with an attribute below


def test_a_global_and_a_global_sharing_an_attributes_name():
    """The old walker looked ``config.table_by_attribute_name`` up in the module's globals:
    it captured the global of that name and left the attribute without a gradient."""
    assert_gradients(lambda s, b, h, i, j: s + GLOBAL_TABLE[h, i, j], [GLOBAL_TABLE])
    config = types.SimpleNamespace(table_by_attribute_name=table(seed=8))
    assert_gradients(
        lambda s, b, h, i, j: s + config.table_by_attribute_name[h, i, j],
        [config.table_by_attribute_name],
    )
    q, k, v = qkv_inputs()
    out = flex_attention(
        q, k, v, score_mod=lambda s, b, h, i, j: s + config.table_by_attribute_name[h, i, j]
    )
    out.sum().backward()
    assert table_by_attribute_name.grad is None  # the global it never read


def test_a_chained_index_the_vmap_way_under_a_mask():
    config = types.SimpleNamespace(bias=torch.randn(B, H, T, T, dtype=torch.float64))
    config.bias.requires_grad_()
    chained = lambda s, b, h, i, j: s + config.bias[b][h][i][j]  # noqa: E731  vmap only
    q, k, v = qkv_inputs()
    block_mask = create_block_mask(P.causal, None, None, T, T, BLOCK_SIZE=8)
    out = flex_attention(q, k, v, score_mod=chained, block_mask=block_mask)
    out.sum().backward()
    bias = config.bias.detach().clone().requires_grad_()
    want = dense_reference(q.detach(), k.detach(), v.detach(), lambda s, *_: s + bias, P.causal)
    want.sum().backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(config.bias.grad, bias.grad)
    assert (config.bias.grad[..., ~torch.ones(T, T, dtype=torch.bool).tril()] == 0).all()


def test_a_score_mod_that_ignores_the_score_works_as_in_pytorch():
    """A constant (every key alike: the mean of the values) and scores from indices only;
    q and k then get zero gradients, v its own, a learned tensor its own."""
    assert_gradients(lambda s, b, h, i, j: torch.tensor(0.0, dtype=torch.float64), [])
    slope = torch.tensor(-0.4, dtype=torch.float64, requires_grad=True)
    assert_gradients(lambda s, b, h, i, j: slope * (i - j).abs(), [slope])
    assert_gradients(lambda s, b, h, i, j: (i >= j).double(), [], mask_mod=P.causal)


def test_reads_that_change_from_tile_to_tile_are_refused_naming_the_function():
    early, late = table(seed=9), table(seed=10)

    def picky_bias(s, b, h, i, j):
        chosen = early if int(i.max()) < 8 else late  # a Python choice per tile
        return s + chosen[h, i, j]

    q, k, v = qkv_inputs()
    block_mask = create_block_mask(P.causal, None, None, T, T, BLOCK_SIZE=8)
    with pytest.raises(CaptureError, match="picky_bias") as error:
        flex_attention(q, k, v, score_mod=picky_bias, block_mask=block_mask)
    assert isinstance(error.value, RuntimeError) and isinstance(error.value, ValueError)
    with torch.no_grad():  # nothing to differentiate: nothing is watched
        flex_attention(q, k, v, score_mod=picky_bias, block_mask=block_mask)


def test_captured_tensors_names_exactly_what_a_function_reads():
    config = types.SimpleNamespace(a=table(seed=11), unused=table(seed=12))
    frozen = torch.randn(3)  # needs no gradient: not a capture
    found = captured_tensors(
        lambda s: s + config.a.sum() + frozen.sum(), torch.zeros(1, requires_grad=True)
    )
    assert len(found) == 1 and found[0] is config.a
