"""Every argument of PyTorch's flex_attention, with its meaning, and PyTorch's exception
types for the mistakes PyTorch refuses: kernel_options, return_lse, return_aux (qkv's and
PyTorch's AuxRequest; max_scores on the CPU), enable_gqa, scale, bad score_mods."""

import math
import warnings

import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

import qkv
from qkv.errors import QkvError
from qkv.functional import patterns as P
from qkv.functional.flex import AuxOutput, AuxRequest, create_block_mask, flex_attention

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
warnings.filterwarnings("ignore", message="return_lse is deprecated")


def inputs(heads=4, kv_heads=4, tq=40, tk=40, dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, tq, 8, generator=gen, dtype=dtype)
    k, v = (torch.randn(2, kv_heads, tk, 8, generator=gen, dtype=dtype) for _ in "kv")
    return q, k, v


def modified_scores(q, k, scale, score_mod, mask_mod):
    """The dense (B, H, Tq, Tk) scores the softmax sees: -inf where masked."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
    scores = q @ k.transpose(-2, -1) * scale
    b, h = torch.arange(q.shape[0]).view(-1, 1, 1, 1), torch.arange(q.shape[1]).view(1, -1, 1, 1)
    i, j = torch.arange(q.shape[2]).view(-1, 1), torch.arange(k.shape[2])
    if score_mod is not None:
        scores = score_mod(scores, b, h, i, j).expand_as(scores)
    return scores.masked_fill(~mask_mod(b, h, i, j), -math.inf)


def test_return_aux_gives_lse_and_max_scores_with_qkvs_or_pytorchs_request():
    q, k, v = inputs()
    late = lambda b, h, i, j: (j <= i) & (i >= 5)  # noqa: E731  queries 0..4 see nothing
    block_mask = create_block_mask(late, None, None, 40, 40, BLOCK_SIZE=16)
    softcap = P.softcap(3.0)
    scores = modified_scores(q, k, 0.3, softcap, late)
    want_lse, want_max = scores.logsumexp(-1), scores.amax(-1)
    for request, output_type in (
        (AuxRequest(lse=True, max_scores=True), AuxOutput),
        (torch_flex.AuxRequest(lse=True, max_scores=True), torch_flex.AuxOutput),
    ):
        out, aux = flex_attention(
            q, k, v, score_mod=softcap, block_mask=block_mask, scale=0.3, return_aux=request
        )
        assert type(aux) is output_type
        torch.testing.assert_close(aux.lse, want_lse)
        torch.testing.assert_close(aux.max_scores, want_max)
        assert aux.max_scores[:, :, :5].isneginf().all()
    _, only_max = flex_attention(q, k, v, return_aux=AuxRequest(max_scores=True))
    assert only_max.lse is None
    torch.testing.assert_close(only_max.max_scores, (q @ k.mT / math.sqrt(8)).amax(-1))
    out, nothing = flex_attention(q, k, v, return_aux=AuxRequest())
    assert nothing == AuxOutput(None, None) and out.shape == q.shape


def test_lse_from_return_aux_has_its_gradient_and_equals_pytorchs_forward():
    q, k, v = (t.requires_grad_() for t in inputs())
    block_mask = create_block_mask(P.sliding_window(9), None, None, 40, 40, BLOCK_SIZE=8)
    out, aux = flex_attention(q, k, v, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    (out.sum() + aux.lse.sum()).backward()
    scores = modified_scores(q, k, 1 / math.sqrt(8), None, P.sliding_window(9))
    want = scores.softmax(-1) @ v
    grads = torch.autograd.grad(want.sum() + scores.logsumexp(-1).sum(), (q, k, v))
    for ours, theirs in zip((q.grad, k.grad, v.grad), grads, strict=True):
        torch.testing.assert_close(ours, theirs)
    with torch.no_grad():
        theirs = torch_flex.flex_attention(
            q.detach(), k.detach(), v.detach(), block_mask=torch_flex.create_block_mask(
                P.sliding_window(9), None, None, 40, 40, "cpu", BLOCK_SIZE=8
            ), return_aux=torch_flex.AuxRequest(lse=True),
        )  # fmt: skip
    torch.testing.assert_close(out, theirs[0])
    torch.testing.assert_close(aux.lse, theirs[1].lse)


def test_kernel_options_accept_any_key_and_check_backend_as_pytorch():
    q, k, v = inputs()
    plain = flex_attention(q, k, v, score_mod=P.softcap(2.0))
    for options in (
        {"BLOCK_M": 64, "BLOCK_N": 64, "PRESCALE_QK": True, "num_warps": 4},
        {"BACKEND": "TRITON", "ROWS_GUARANTEED_SAFE": True, "fwd_BLOCK_M": 32},
        {"BACKEND": "FLASH", "made_up_key": object()},
    ):
        got = flex_attention(q, k, v, score_mod=P.softcap(2.0), kernel_options=options)
        torch.testing.assert_close(got, plain)
    with pytest.raises(ValueError, match="Invalid BACKEND|invalid BACKEND"):
        flex_attention(q, k, v, kernel_options={"BACKEND": "CUTLASS"})
    with pytest.raises(RuntimeError, match="FORCE_USE_FLEX_ATTENTION"):
        flex_attention(q, k, v, kernel_options={"BACKEND": "AUTO", "FORCE_USE_FLEX_ATTENTION": 1})
    with pytest.raises(AssertionError, match="OUTPUT_LOGSUMEXP"):
        flex_attention(q, k, v, kernel_options={"OUTPUT_LOGSUMEXP": True})
    with pytest.raises(NotImplementedError, match="FLASH"):
        flex_attention(
            q, k, v, kernel_options={"BACKEND": "FLASH"}, return_aux=AuxRequest(max_scores=True)
        )


def test_return_lse_and_return_aux_together_raise_as_pytorch():
    q, k, v = inputs()
    for request in (AuxRequest(lse=True), torch_flex.AuxRequest(lse=True)):
        with pytest.raises(ValueError, match="both return_lse and return_aux"):
            flex_attention(q, k, v, return_lse=True, return_aux=request)
        with pytest.raises(ValueError, match="both return_lse and return_aux"):
            torch_flex.flex_attention(q, k, v, return_lse=True, return_aux=request)
    with pytest.raises(QkvError, match="AuxRequest"):
        flex_attention(q, k, v, return_aux=True)


def test_enable_gqa_and_scale_equal_pytorchs_forward():
    q, k, v = inputs(heads=6, kv_heads=2)
    mask_mod = qkv.and_masks(P.causal, P.sliding_window(12))
    ours = flex_attention(
        q, k, v, block_mask=create_block_mask(mask_mod, None, None, 40, 40, BLOCK_SIZE=16),
        score_mod=P.alibi(qkv.functional.alibi_slopes(6)), scale=0.21, enable_gqa=True,
        return_lse=True,
    )  # fmt: skip
    theirs = torch_flex.flex_attention(
        q, k, v, block_mask=torch_flex.create_block_mask(mask_mod, None, None, 40, 40, "cpu", 16),
        score_mod=P.alibi(qkv.functional.alibi_slopes(6)), scale=0.21, enable_gqa=True,
        return_lse=True,
    )  # fmt: skip
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="enable_gqa"):
        flex_attention(q, k, v)
    with pytest.raises(ValueError, match="divide"):
        flex_attention(
            q, k[:, :1].expand(2, 4, 40, 8), v[:, :1].expand(2, 4, 40, 8), enable_gqa=True
        )


def test_score_mods_of_other_dtypes_and_shapes_as_pytorch():
    q, k, v = (t.float() for t in inputs())
    for score_mod in (
        lambda s, b, h, i, j: (s > 0).int(),  # integer scores: cast, as PyTorch stores them
        lambda s, b, h, i, j: s.double() * 2,  # float64 on float32 scores
        lambda s, b, h, i, j: torch.tensor(1.5),  # a constant
        lambda s, b, h, i, j: s + (i - j).float() * 0.1,  # broadcast from indices
    ):
        torch.testing.assert_close(
            flex_attention(q, k, v, score_mod=score_mod),
            torch_flex.flex_attention(q, k, v, score_mod=score_mod),
        )
    stacked = lambda s, b, h, i, j: torch.stack([s, s])  # noqa: E731  two values per element
    with pytest.raises(RuntimeError):
        torch_flex.flex_attention(q, k, v, score_mod=stacked)
    with pytest.raises(RuntimeError, match="one value per element") as error:
        flex_attention(q, k, v, score_mod=stacked)
    assert isinstance(error.value, QkvError)


def test_inputs_pytorch_refuses_raise_its_exception_types():
    q, k, v = inputs()
    with pytest.raises(ValueError, match="embedding dimension"):
        flex_attention(q, k[..., :4], v)
    with pytest.raises(NotImplementedError, match="4-D"):
        flex_attention(q[0], k[0], v[0])
    with pytest.raises(RuntimeError, match="one device"):
        flex_attention(q, k.to("meta"), v)


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (flex_attention, torch_flex.flex_attention),
        (create_block_mask, torch_flex.create_block_mask),
        (qkv.create_mask, torch_flex.create_mask),
        (qkv.BlockMask.from_kv_blocks, torch_flex.BlockMask.from_kv_blocks),
        (qkv.BlockMask.__getitem__, torch_flex.BlockMask.__getitem__),
        (qkv.BlockMask._adjust, torch_flex.BlockMask._adjust),
        (qkv.BlockMask.as_tuple, torch_flex.BlockMask.as_tuple),
        (qkv.BlockMask.to_string, torch_flex.BlockMask.to_string),
    ],
    ids=lambda f: getattr(f, "__qualname__", str(f)),
)
def test_signatures_are_pytorchs(ours, theirs):
    """Every parameter of torch 2.13's function, by name, kind and default: a call written
    for PyTorch binds the same way to qkv's."""
    import inspect

    def described(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert described(ours) == described(theirs)
