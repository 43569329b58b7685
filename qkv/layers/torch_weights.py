"""Weights from PyTorch's own layers copied into qkv's: ``MultiHeadAttention.from_torch``."""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError

__all__ = ["layer_from_torch"]


def layer_from_torch(layer_type: type, module: nn.MultiheadAttention) -> nn.Module:
    """A ``layer_type`` (qkv's ``MultiHeadAttention``) with the weights of ``module``: the
    stacked or separate in-projections, their biases and the output projection, on the
    module's device and dtype."""
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(
            f"from_torch takes a torch.nn.MultiheadAttention, got {type(module).__name__}"
        )
    if module.bias_k is not None or module.add_zero_attn:
        raise InputError("add_bias_kv / add_zero_attn have no qkv equivalent")
    d = module.embed_dim
    has_bias = module.in_proj_bias is not None
    layer = layer_type(
        d,
        module.num_heads,
        kdim=module.kdim,
        vdim=module.vdim,
        bias=has_bias,
        dropout=module.dropout,
    )
    layer = layer.to(device=module.out_proj.weight.device, dtype=module.out_proj.weight.dtype)
    with torch.no_grad():
        if module._qkv_same_embed_dim:
            weights = module.in_proj_weight.chunk(3)
        else:
            weights = (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        biases = module.in_proj_bias.chunk(3) if has_bias else (None, None, None)
        for (weight, bias), w, b in zip(layer.projections(), weights, biases, strict=True):
            weight.copy_(w)
            if b is not None:
                bias.copy_(b)
        layer.out_proj.weight.copy_(module.out_proj.weight)
        if has_bias:
            layer.out_proj.bias.copy_(module.out_proj.bias)
    return layer
