"""PyTorch's fused kernels: ``torch.nn.functional.scaled_dot_product_attention``."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from ..masks import causal_mask
from . import AttentionCall, AttentionOutput, register_backend

__all__ = ["SDPABackend", "keep_nan_rows", "zeroes_fully_masked_rows"]


@functools.cache
def zeroes_fully_masked_rows(
    device_type: str, dtype: torch.dtype = torch.float32, head_dim: int = 2
) -> bool:
    """Whether PyTorch's fused kernel on this kind of device returns 0 for a query whose keys
    are all masked (recent CPU kernels) rather than NaN or a uniform average (older releases;
    CUDA's kernels differ by dtype and head size).  Probed once per device type, dtype and
    head size, the things that choose the kernel, so the fix-up below runs only where needed."""
    q = torch.ones(1, 1, 2, head_dim, device=device_type, dtype=dtype)
    mask = torch.tensor([[True, True], [False, False]], device=device_type)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    return bool(torch.all(out[..., 1, :] == 0))


class SDPABackend:
    """Fast and fused; returns no weights.  Grouped key/value heads go in as they are."""

    name = "sdpa"
    # SDPA's enable_gqa (PyTorch >= 2.5, our floor) shares each key/value head among its
    # query heads inside the kernel, so the (B, H, Tk, Dh) repeat is never written (the CPU
    # flash kernel, with or without a mask).
    grouped_heads = True

    def unsupported(self, call: AttentionCall) -> str | None:
        if call.need_weights:
            return "need_weights=True: the fused kernels never form the weight matrix"
        mask = call.mask
        if (
            mask is not None
            and mask.is_floating_point()
            and mask.requires_grad
            and torch.is_grad_enabled()
        ):
            return (
                "a float bias that requires grad: SDPA falls back to its O(T^2) math kernel; "
                "chunked computes the bias gradient in O(T) memory"
            )
        return None

    def run(self, call: AttentionCall) -> AttentionOutput:
        query, key, value, mask = call.query, call.key, call.value, call.mask
        tq, tk = query.shape[-2], key.shape[-2]
        is_causal = call.causal and mask is None and tq == tk
        if call.causal and not is_causal:
            # SDPA's is_causal aligns the diagonal to the top-left when Tq != Tk and cannot be
            # combined with a mask: build the end-aligned causal mask and merge it in.
            below = causal_mask(tq, tk, device=query.device)
            if mask is None:
                mask = below
            elif mask.dtype == torch.bool:
                mask = mask & below
            else:
                mask = mask.masked_fill(~below, float("-inf"))
        grouped = key.shape[1] != query.shape[1]
        if grouped and mask is not None and query.device.type != "cpu":
            # CUDA's fused kernels take grouped heads only without a mask; with one, SDPA
            # would fall back to its O(Tq * Tk)-memory math kernel: repeat them here instead.
            call = call.repeated_heads()
            key, value, grouped = call.key, call.value, False
        attended = None
        if mask is not None and not zeroes_fully_masked_rows(
            query.device.type, query.dtype, query.shape[-1]
        ):
            # Older PyTorch gives NaN (and NaN gradients) for fully masked rows: open such
            # rows to every key, then zero their output, so values and gradients stay finite.
            if mask.dtype == torch.bool:
                attended = mask.any(-1, keepdim=True)
                mask = mask | ~attended
            else:
                attended = (mask > float("-inf")).any(-1, keepdim=True)
                mask = mask.masked_fill(~attended, 0.0)
        output = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=mask,
            dropout_p=call.dropout,
            is_causal=is_causal,
            scale=call.scale,
            enable_gqa=grouped,
        )
        if attended is not None:
            output = output * attended
        if mask is None:
            output = keep_nan_rows(output, query)
        return AttentionOutput(output, None)


def keep_nan_rows(output: Tensor, query: Tensor) -> Tensor:
    """NaN in, NaN out: without a mask, PyTorch's CPU flash kernel (2.13) returns 0 for a
    query holding a NaN, as if it had nothing to attend; every other backend returns NaN.
    A NaN anywhere makes the queries' sum NaN, so one reduction with no temporary (~30x
    cheaper than an elementwise ``isnan``: 10 against 300 us for a (12, 4, 64, 32) batch)
    decides whether the rows need looking at; infinities of both signs only cost the look."""
    if not bool(query.detach().sum().isnan()):
        return output
    poisoned = query.isnan().any(-1, keepdim=True)  # (B, H, Tq, 1)
    return output.masked_fill(poisoned, float("nan")) if poisoned.any() else output


register_backend(SDPABackend(), priority=0)
