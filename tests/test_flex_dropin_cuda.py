"""On CUDA qkv.flex_attention hands the call to PyTorch's compiled FlexAttention (the engine
there) and explain_backend says so; on the CPU it is qkv's tile kernel.  The CUDA cases run
with ``python -m pytest -m cuda`` on a GPU machine and skip elsewhere, saying why."""

import types

import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

import qkv
from qkv.functional import patterns as P
from qkv.functional.flex import AuxRequest, create_block_mask, flex_attention

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_explain_backend_names_the_engine_on_each_device():
    q = torch.randn(1, 2, 16, 8)
    choice = qkv.explain_backend(q, q, q, score_mod=P.softcap(5.0))
    assert choice.backend == "flex" and "tile kernel" in choice.engine
    assert "engine: qkv's block-sparse tile kernel" in str(choice)
    meta = q.to("meta")
    assert (
        "compiled FlexAttention"
        not in qkv.explain_backend(meta, meta, meta, score_mod=P.softcap(5.0)).engine
    )


@pytest.mark.cuda
@needs_cuda
def test_explain_backend_on_cuda_says_pytorchs_compiled_flexattention():
    q = torch.randn(1, 2, 16, 8, device="cuda")
    choice = qkv.explain_backend(q, q, q, score_mod=P.softcap(5.0))
    assert "PyTorch's compiled FlexAttention" in choice.engine


@pytest.mark.cuda
@needs_cuda
def test_cuda_calls_equal_pytorchs_compiled_flexattention_with_either_block_mask():
    """The same call through qkv.flex_attention and torch.compile(torch's): output, lse,
    and the gradients of q, k, v and of a table reached through an attribute."""
    compiled = torch.compile(torch_flex.flex_attention, dynamic=False)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 256, 64, generator=gen).cuda() for _ in "qkv")
    config = types.SimpleNamespace(table=(0.1 * torch.randn(4, 33, generator=gen)).cuda())
    mask_mod = qkv.and_masks(P.causal, P.sliding_window(70))
    results = []
    for flex, block_mask in (
        (flex_attention, create_block_mask(mask_mod, None, None, 256, 256, device="cuda")),
        (flex_attention, torch_flex.create_block_mask(mask_mod, None, None, 256, 256, "cuda")),
        (compiled, torch_flex.create_block_mask(mask_mod, None, None, 256, 256, "cuda")),
    ):
        table = config.table.clone().requires_grad_()
        holder = types.SimpleNamespace(table=table)
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out, aux = flex(
            *inputs, score_mod=P.relative_bias(holder.table), block_mask=block_mask,
            return_aux=torch_flex.AuxRequest(lse=True),
        )  # fmt: skip
        (out.square().sum() + aux.lse.sum()).backward()
        results.append((out, aux.lse, *(t.grad for t in inputs), table.grad))
    for ours in results[:2]:
        for a, b in zip(ours, results[2], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    out, aux = flex_attention(q, k, v, return_aux=AuxRequest(lse=True))
    assert aux.lse.shape == (2, 4, 256) and out.device.type == "cuda"


@pytest.mark.cuda
@needs_cuda
def test_a_cuda_block_mask_with_cpu_tensors_raises_runtimeerror_as_pytorch():
    q = torch.randn(1, 2, 128, 8)
    for cuda_mask in (
        create_block_mask(P.causal, None, None, 128, 128, device="cuda"),
        torch_flex.create_block_mask(P.causal, None, None, 128, 128, device="cuda"),
    ):
        with pytest.raises(RuntimeError, match="same device"):
            flex_attention(q, q, q, block_mask=cuda_mask)


def test_the_handover_builds_pytorchs_mask_and_call(monkeypatch):
    """What a CUDA call hands PyTorch, checked on the CPU with PyTorch's eager function in
    place of the compiled one: a qkv BlockMask arrives as PyTorch's with the same lists, and
    the answer (with PyTorch's AuxOutput) equals qkv's own kernel's."""
    import warnings

    from qkv.functional import flex as flex_module

    seen = []

    def eager(*args, **kwargs):
        seen.append(args[4])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch_flex.flex_attention(*args, **kwargs)

    monkeypatch.setitem(flex_module._COMPILED, "compiled", eager)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 96, 16, generator=gen) for _ in "qkv")
    mask = create_block_mask(P.sliding_window(20), None, None, 96, 96, BLOCK_SIZE=32)
    request = torch_flex.AuxRequest(lse=True)
    out, aux = flex_module._on_cuda(q, k, v, P.softcap(4.0), mask, None, False, False,
                                    {"BLOCK_M": 64}, request)  # fmt: skip
    assert type(seen[0]) is torch_flex.BlockMask
    torch.testing.assert_close(seen[0].to_dense(), mask.to_dense())
    ours, our_aux = flex_attention(q, k, v, P.softcap(4.0), mask, return_aux=request)
    assert type(aux) is type(our_aux) is torch_flex.AuxOutput
    torch.testing.assert_close(out, ours, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(aux.lse, our_aux.lse, atol=1e-5, rtol=1e-5)
