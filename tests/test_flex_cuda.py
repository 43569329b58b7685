"""The flex kernel and the sliding-window LM on every device (``python -m pytest -m cuda`` on
a GPU machine runs them there too; here the CUDA cases skip, saying why)."""

import pytest
import torch
import torch.nn.functional as F

import qkv
from qkv.functional.patterns import sliding_window

from .test_lm import random_ids, tiny_lm

pytestmark = pytest.mark.cuda


def test_flex_window_forward_and_backward_equal_sdpa_with_the_dense_mask(device):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 200, 16, generator=generator).to(device) for _ in range(3))
    block_mask = qkv.create_block_mask(
        sliding_window(48), None, None, 200, 200, device=device, BLOCK_SIZE=64
    )
    distance = torch.arange(200, device=device)[:, None] - torch.arange(200, device=device)
    dense = (distance >= 0) & (distance < 48)
    grads = []
    for run in (
        lambda q, k, v: qkv.flex_attention(q, k, v, block_mask=block_mask),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense),
    ):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        output = run(*inputs)
        output.square().sum().backward()
        grads.append((output, *(t.grad for t in inputs)))
    for ours, reference in zip(*grads, strict=True):
        assert ours.device.type == device.type
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-4)


def test_the_windowed_lm_and_its_rolling_cache_on_the_device(device):
    model = tiny_lm("rope", window=4).to(device)
    ids = random_ids(2, 30).to(device)
    flex = model(ids).logits
    torch.testing.assert_close(flex, model(ids, need_weights=True).logits, rtol=1e-4, atol=1e-4)
    full = F.log_softmax(flex, dim=-1)
    state = model.start(ids[:, :5])
    for t in range(5, 30):
        output = model.step(ids[:, t], state)
        torch.testing.assert_close(output.log_probs, full[:, t], rtol=1e-4, atol=1e-4)
        state = output.state
    assert all(
        cache.key.shape[2] == 3 and cache.key.device == flex.device for cache in state.caches
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_forward_and_backward_equal_pytorchs_compiled_flex_attention_on_cuda():
    """On a GPU PyTorch's FlexAttention compiles and trains (and qkv.flex_attention hands
    CUDA calls to it): the same mask and score functions give, with qkv's tile kernel on
    the CPU, the same output and the same gradients of q, k, v and of a captured learned
    bias as PyTorch's compiled kernel on the GPU."""
    from torch.nn.attention import flex_attention as torch_flex

    from qkv.functional import patterns as P

    compiled = torch.compile(torch_flex.flex_attention, dynamic=False)
    length, heads = 384, 4
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, 64, generator=generator) for _ in range(3))
    table = 0.1 * torch.randn(heads, 33, generator=generator)

    def cases(device):
        documents = (torch.arange(length) // 100).to(device)
        slopes = qkv.functional.alibi_slopes(heads).to(device)
        return {
            "window+alibi": (
                qkv.and_masks(P.causal, P.sliding_window(70)),
                lambda t: P.alibi(slopes),
            ),
            "document+relative": (P.document(documents), P.relative_bias),
            "prefix+softcap": (P.prefix_lm(50), lambda t: P.softcap(20.0)),
        }

    runs = (
        (qkv.flex_attention, qkv.create_block_mask, "cpu"),
        (compiled, torch_flex.create_block_mask, "cuda"),
    )
    for name in cases("cpu"):
        results = []
        for flex, make_mask, device in runs:
            mask_mod, make_score = cases(device)[name]
            learned = table.clone().to(device).requires_grad_()  # a leaf on each device
            inputs = [t.clone().to(device).requires_grad_() for t in (q, k, v)]
            block_mask = make_mask(mask_mod, None, None, length, length, device=device)
            output = flex(*inputs, score_mod=make_score(learned), block_mask=block_mask)
            output.square().sum().backward()
            grads = (output, *(t.grad for t in inputs), learned.grad)
            results.append([None if g is None else g.detach().cpu() for g in grads])
        for label, ours, theirs in zip(("out", "dq", "dk", "dv", "dtable"), *results):
            if label == "dtable" and theirs is None:
                continue  # the score function captured no learned tensor
            torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3, msg=f"{name} {label}")
