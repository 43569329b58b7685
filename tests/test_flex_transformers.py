"""transformers' own FlexAttention path (``attn_implementation="flex_attention"``) run on
qkv.flex_attention by swapping the one function it calls: its block masks (PyTorch's,
built by transformers' masking code) and its score_mod go through unchanged, and a tiny
Llama trains on the CPU equal to the eager attention, forward and backward."""

import copy
import warnings

import pytest
import torch

import qkv

transformers = pytest.importorskip("transformers")
flex_integration = pytest.importorskip("transformers.integrations.flex_attention")


def tiny_llamas():
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    flex = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(config), attn_implementation="flex_attention"
    )
    eager = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(config), attn_implementation="eager"
    )
    eager.load_state_dict(flex.state_dict())
    return flex, eager


def test_transformers_flex_path_trains_on_qkv_equal_to_eager(monkeypatch):
    masks = []

    def on_qkv(query, key, value, training=False, **kwargs):
        masks.append(kwargs.get("block_mask"))
        return qkv.flex_attention(query, key, value, **kwargs)

    monkeypatch.setattr(flex_integration, "compile_friendly_flex_attention", on_qkv)
    flex, eager = tiny_llamas()
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    keep = torch.ones(2, 40, dtype=torch.long)
    keep[1, 29:] = 0  # the second row is 29 tokens, right-padded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = flex(ids, attention_mask=keep)
        reference = eager(ids, attention_mask=keep)
    assert masks and all(type(m).__module__ == "torch.nn.attention.flex_attention" for m in masks)
    real = keep.bool()
    torch.testing.assert_close(ours.logits[real], reference.logits[real], atol=1e-5, rtol=1e-5)
    ours.logits[real].logsumexp(-1).sum().backward()
    reference.logits[real].logsumexp(-1).sum().backward()
    for (name, a), b in zip(flex.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
