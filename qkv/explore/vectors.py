"""The query, key and value vectors of an attention, for the page's neuron view: the
step-by-step of one query, ``z_i = sum_j softmax_j(q_i . k_j / sqrt(d)) v_j``.

They are caught as the model runs (a forward hook on each asked-for layer's
:class:`~qkv.layers.MultiHeadAttention` reads its inputs: ``x`` for a self-attention, the
query states and the memory for a cross-attention) and recomputed from the layer's own
projections, ``W_Q x + b_Q`` and so on, split into heads and rotated by the layer's
attention positions (RoPE) as the layer does before its scores.  A layer whose
positions add a bias to the scores (ALiBi) is not stored: the page's steps would not be the
model's, and the page says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from qkv.errors import InputError, NotFiniteError
from qkv.layers import MultiHeadAttention

__all__ = [
    "VECTOR_DIGITS",
    "chosen_layers",
    "catch_vectors",
    "page_vectors",
    "stored_vectors",
    "stored_from",
]

#: q, k and v go into the page with this many significant digits.
VECTOR_DIGITS = 5


def chosen_layers(vectors: str | Sequence[int] | None, count: int) -> list[int]:
    """The layers whose vectors to store: None (none), "all", or layer indices."""
    if vectors is None:
        return []
    if vectors == "all":
        return list(range(count))
    if isinstance(vectors, str):
        try:
            vectors = [int(part) for part in vectors.split(",") if part.strip()]
        except ValueError:
            raise InputError(
                f"vectors={vectors!r}: give 'all' or layer numbers, e.g. 0,2", fields=("vectors",)
            ) from None
    layers = sorted(set(vectors))
    wrong = [layer for layer in layers if not 0 <= layer < count]
    if wrong or not layers:
        raise InputError(
            f"vectors={wrong or vectors}: the model has layers 0..{count - 1}", fields=("vectors",)
        )
    return layers


@contextlib.contextmanager
def catch_vectors(modules: Sequence[nn.Module], layers: Sequence[int]) -> Iterator[dict]:
    """While the block runs, fills {layer: {"q", "k", "v"} or {"absent": reason}} for the
    layers asked for; q (H, Tq, Dh), k and v (Hkv, Tk, Dh) (Tk = Tq for a self-attention),
    float32 on the CPU, one sequence."""
    caught: dict[int, dict] = {}
    handles = []
    for layer in layers:
        module = modules[layer]
        if not isinstance(module, MultiHeadAttention):
            caught[layer] = {"absent": f"layer {layer}'s attention is not a MultiHeadAttention"}
            continue
        handles.append(
            module.register_forward_pre_hook(_hook(module, layer, caught), with_kwargs=True)
        )
    try:
        yield caught
    finally:
        for handle in handles:
            handle.remove()


def _hook(module: MultiHeadAttention, layer: int, caught: dict):
    def read(_module, args, kwargs):
        x = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs.get("key")
        value = args[2] if len(args) > 2 else kwargs.get("value")
        if kwargs.get("cache") is not None:
            caught[layer] = {"absent": "the neuron view shows attention without a cache"}
            return
        key = x if key is None else key
        value = key if value is None else value
        caught[layer] = _vectors(module, *(t[:1].detach() for t in (x, key, value)))

    return read


def _vectors(module: MultiHeadAttention, x: Tensor, key: Tensor, value: Tensor) -> dict:
    (w_q, b_q), (w_k, b_k), (w_v, b_v) = module.projections()
    q = _heads(F.linear(x, w_q, b_q), module.num_heads)  # (1, H, Tq, Dh)
    k = _heads(F.linear(key, w_k, b_k), module.num_kv_heads)  # (1, Hkv, Tk, Dh)
    v = _heads(F.linear(value, w_v, b_v), module.num_kv_heads)
    positions = module.positions
    if positions is not None:
        bias = positions.bias(
            query_start=0,
            num_queries=x.shape[1],
            num_keys=key.shape[1],
            device=x.device,
            dtype=x.dtype,
        )
        if bias is not None:
            name = type(positions).__name__
            return {"absent": f"{name} adds a bias to the scores; the neuron view shows q.k alone"}
        q, k = positions.rotate(q, start=0), positions.rotate(k, start=0)
    return {name: t[0].float().cpu() for name, t in (("q", q), ("k", k), ("v", v))}


def _heads(x: Tensor, heads: int) -> Tensor:
    """Shapes: (B, T, H * Dh) -> (B, H, T, Dh)."""
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def page_vectors(found: dict) -> dict:
    """The page's ``vectors`` entry of one layer: q, k, v as nested lists of numbers with
    VECTOR_DIGITS significant digits, and the scale 1/sqrt(Dh) (or why they are absent)."""
    if "absent" in found:
        return {"absent": found["absent"]}
    q = found["q"]
    return {
        "q": _rounded(found["q"]),
        "k": _rounded(found["k"]),
        "v": _rounded(found["v"]),
        "scale": 1.0 / q.shape[-1] ** 0.5,
    }


def _rounded(t: Tensor) -> list:
    if not bool(torch.isfinite(t).all()):
        raise NotFiniteError(
            "the model's q, k or v hold NaN or inf: its weights are not finite numbers (a "
            "diverged run, a corrupt file)"
        )
    return [[[float(f"{x:.{VECTOR_DIGITS}g}") for x in row] for row in head] for head in t.tolist()]


def stored_vectors(modules: Sequence[nn.Module], vectors, run, *args) -> tuple[object, dict]:
    """``run(*args)``'s result, and the page's ``vectors`` entry ({str(layer): page_vectors})
    for the layers ``vectors`` asks for (see :func:`chosen_layers`)."""
    with catch_vectors(modules, chosen_layers(vectors, len(modules))) as caught:
        result = run(*args)
    return result, stored_from(caught, vectors, len(modules))


def stored_from(caught: dict, vectors, count: int) -> dict:
    """The page's ``vectors`` entry from vectors caught for (at least) the layers asked."""
    return {str(layer): page_vectors(caught[layer]) for layer in chosen_layers(vectors, count)}
