"""Position information (SPEC section 4): sinusoidal encodings, rotary embeddings, ALiBi.

Self-attention is permutation-equivariant: without these, shuffling the tokens shuffles the
outputs the same way, and word order is invisible.  Three ways to put order back:

- sinusoidal encodings (Vaswani et al. 2017), *added* to the token vectors;
- rotary embeddings, RoPE (Su et al. 2021), which *rotate* queries and keys so that
  ``q_m . k_n`` depends on the positions only through ``m - n``;
- ALiBi (Press et al. 2022), an additive bias ``-slope * distance`` on the scores, passed to
  :func:`qkv.attention` as a float ``mask``.

Tables are computed in float64 (float32 on MPS, which has no float64) and then cast, so
large positions keep their precision.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from qkv.errors import InputError

__all__ = [
    "sinusoidal_encoding",
    "rotary_angles",
    "apply_rotary",
    "rotate_half",
    "alibi_slopes",
    "alibi_bias",
]

Device = torch.device | str | None


def sinusoidal_encoding(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    device: Device = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""The encodings of Vaswani et al. 2017 for positions ``offset .. offset + length - 1``.

    $$PE_{t, 2i} = \sin\left(t / b^{2i/d}\right),\qquad PE_{t, 2i+1} = \cos\left(t / b^{2i/d}\right)$$

    ``PE[pos, 2i] = sin(pos / base^(2i/dim))`` and ``PE[pos, 2i+1] = cos(pos / base^(2i/dim))``.
    Every position has its own value, for any length, so a model can run on sequences longer
    than any it was trained on.  An odd ``dim`` is allowed: the last column is then a sine
    whose cosine partner would fall outside the table.

    Shapes: -> (length, dim).  ``dtype`` defaults to ``torch.get_default_dtype()``.
    """
    _check_positive_int("dim", dim)
    _check_non_negative_int("length", length)
    _check_non_negative_int("offset", offset)
    _check_base(base)
    work = _work_dtype(device)
    positions = torch.arange(offset, offset + length, device=device, dtype=work)
    even = torch.arange(0, dim, 2, device=device, dtype=work)  # 2i, for i = 0 .. ceil(dim/2) - 1
    angles = positions[:, None] / base ** (even / dim)  # (length, ceil(dim/2))
    encoding = torch.empty(length, dim, device=device, dtype=work)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return encoding.to(dtype or torch.get_default_dtype())


def rotary_angles(
    positions: int | Tensor,
    head_dim: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    device: Device = None,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """The cos and sin tables of rotary embeddings, for :func:`apply_rotary`.

    Pairing convention: **half-split** ("rotate_half", as GPT-NeoX and LLaMA in Hugging Face
    transformers): channel ``i`` is paired with channel ``i + Dh/2``, and the pair at
    position ``p`` is rotated by the angle ``p * base^(-2i/Dh)``, ``i = 0 .. Dh/2 - 1``.
    Each table holds these angles twice, ``[theta_0 .. theta_{Dh/2-1}, theta_0 ..]``.

    Args:
        positions: an int ``T`` (positions ``offset .. offset + T - 1``), or a tensor of
            positions (T,) or (B, T) (e.g. per-sequence positions of a left-padded batch),
            to which ``offset`` is added.  Decoding with a KV cache: the new token at
            position ``t`` uses ``positions=1, offset=t``.
        head_dim: ``Dh``, even.
        device: where to build the tables (ignored when ``positions`` is a tensor: its
            device is used).

    Shapes: -> cos, sin, each (T, Dh) or (B, T, Dh).
    """
    _check_even_head_dim(head_dim)
    _check_base(base)
    if isinstance(positions, Tensor):
        if positions.dim() not in (1, 2) or positions.is_complex() or positions.dtype == torch.bool:
            raise InputError(
                f"positions must be a real tensor of shape (T,) or (B, T), got dtype "
                f"{positions.dtype} and shape {tuple(positions.shape)}"
            )
        device = positions.device
        pos = positions.to(_work_dtype(device)) + offset
    elif isinstance(positions, int) and not isinstance(positions, bool):
        _check_non_negative_int("positions", positions)
        _check_non_negative_int("offset", offset)
        pos = torch.arange(offset, offset + positions, device=device, dtype=_work_dtype(device))
    else:
        raise TypeError(
            f"positions must be an int length or a tensor, got {type(positions).__name__}"
        )
    even = torch.arange(0, head_dim, 2, device=device, dtype=pos.dtype)
    inverse_frequency = base ** (-even / head_dim)  # (Dh/2,)
    angles = pos[..., None] * inverse_frequency  # (..., T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, Dh)
    dtype = dtype or torch.get_default_dtype()
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension, split in halves.

    Multiplying by sin and adding ``x * cos`` rotates each pair ``(x_i, x_{i + Dh/2})``.
    Shapes: (..., Dh) -> (..., Dh).
    """
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    r"""Rotate each channel pair ``(x_i, x_{i + Dh/2})`` of ``x`` by its angle (RoPE).

    $$\mathrm{RoPE}(x, t) = x \cos(t\theta) + \mathrm{rotate\_half}(x) \sin(t\theta),\qquad \mathrm{RoPE}(q, m) \cdot \mathrm{RoPE}(k, n) = f(q, k, m - n)$$

    ``x * cos + rotate_half(x) * sin``, the half-split convention of :func:`rotary_angles`.
    Apply it to queries and keys (not values): then ``q_m . k_n`` depends on the positions
    only through ``m - n``.  Norms are unchanged.

    Shapes: x (B, H, T, Dh); cos, sin (T, Dh) or (B, T, Dh) -> (B, H, T, Dh).
    """
    if not isinstance(x, Tensor) or x.dim() != 4:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InputError(
            f"apply_rotary expects x of shape (B, H, T, Dh), got {shape}; "
            "use split_heads() to go from (B, T, D) to (B, H, T, Dh)"
        )
    batch, _, length, head_dim = x.shape
    _check_even_head_dim(head_dim)
    if cos.shape != sin.shape:
        raise InputError(f"cos and sin shapes differ: {tuple(cos.shape)} vs {tuple(sin.shape)}")
    if cos.shape not in ((length, head_dim), (batch, length, head_dim)):
        raise InputError(
            f"cos/sin of shape {tuple(cos.shape)} do not fit x of shape {tuple(x.shape)}; "
            f"expected (T, Dh) = {(length, head_dim)} or (B, T, Dh) = {(batch, length, head_dim)}"
            " (build them with rotary_angles(T, Dh) for this T and Dh)"
        )
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, Dh): the same angles for every head
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    # rotate_half(x) * sin == roll(x, Dh/2) * [-sin_1, sin_2]: one copy of x instead of
    # three (chunk, neg, cat), forward and backward -- a fifth off RoPE's time on a CPU
    half = head_dim // 2
    signed = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)  # (T, Dh): small
    return x * cos + x.roll(half, dims=-1) * signed


def alibi_slopes(
    num_heads: int, *, device: Device = None, dtype: torch.dtype | None = None
) -> Tensor:
    """The ALiBi slopes of Press et al. 2022: a geometric sequence, one per head.

    For ``n`` heads, a power of two: ``2^(-8/n * i)`` for ``i = 1 .. n`` (8 heads:
    1/2, 1/4, .., 1/256).  Otherwise, as the paper: the slopes of the largest power of two
    ``p < n``, followed by every other slope of ``2p`` heads (the odd-numbered ones, which
    fall between the first), up to ``n`` slopes in all.

    Shapes: -> (H,).
    """
    _check_positive_int("num_heads", num_heads)
    power = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = _power_of_two_slopes(power)
    if power < num_heads:
        slopes += _power_of_two_slopes(2 * power)[0::2][: num_heads - power]
    return torch.tensor(slopes, device=device, dtype=dtype or torch.get_default_dtype())


def alibi_bias(
    num_heads: int,
    query_len: int,
    key_len: int,
    *,
    slopes: Tensor | None = None,
    query_start: int | None = None,
    device: Device = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""ALiBi's additive attention bias, ``-slope_h * |i - j|``, for :func:`qkv.attention`.

    $$b_{h,i,j} = -m_h \, |i - j|$$

    Pass it as a float mask: ``attention(q, k, v, mask=bias, causal=True)``.  The keys sit at
    positions ``0 .. key_len - 1``.  By default the queries are the *last* ``query_len`` of
    them (end-aligned, as qkv's causal mask: query ``i`` sits at position
    ``i + key_len - query_len``), so one new query of a cached decode gets the last row of the
    full bias; ``query_start`` places them at ``query_start .. query_start + query_len - 1``
    instead.  With ``causal=True`` only keys ``j <= i`` are seen, where ``|i - j| = i - j`` and
    the bias is the paper's ``-slope * (i - j)``; without it, the bias is symmetric in the
    distance (the usual bidirectional variant).

    Args:
        slopes: (H,) slopes to use instead of :func:`alibi_slopes` (e.g. a layer's buffer);
            its device and dtype then win over ``device`` and ``dtype``.

    Shapes: -> (1, H, Tq, Tk).
    """
    _check_positive_int("num_heads", num_heads)
    _check_positive_int("query_len", query_len)
    _check_positive_int("key_len", key_len)
    if query_start is None:
        if key_len < query_len:
            raise InputError(
                f"alibi_bias needs key_len >= query_len (queries are the last positions of the "
                f"keys), got query_len={query_len}, key_len={key_len}; or pass query_start"
            )
        query_start = key_len - query_len
    _check_non_negative_int("query_start", query_start)
    if slopes is None:
        slopes = alibi_slopes(num_heads, device=device, dtype=dtype)
    elif slopes.shape != (num_heads,):
        raise InputError(
            f"slopes of shape {tuple(slopes.shape)} do not match num_heads={num_heads}; "
            f"expected ({num_heads},)"
        )
    rows = torch.arange(query_len, device=slopes.device)[:, None] + query_start
    cols = torch.arange(key_len, device=slopes.device)[None, :]
    distance = (rows - cols).abs().to(slopes.dtype)  # (Tq, Tk)
    return -slopes[None, :, None, None] * distance  # (1, H, Tq, Tk)


def _power_of_two_slopes(num_heads: int) -> list[float]:
    start = 2.0 ** (-8.0 / num_heads)
    return [start ** (i + 1) for i in range(num_heads)]


def _work_dtype(device: Device) -> torch.dtype:
    if device is not None and torch.device(device).type == "mps":
        return torch.float32
    return torch.float64


def _check_positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{name}={value!r} must be a positive integer")


def _check_non_negative_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InputError(f"{name}={value!r} must be a non-negative integer")


def _check_base(base: float) -> None:
    if not base > 0 or base == 1:
        raise InputError(f"base={base} must be positive and not 1 (10000.0 is the usual choice)")


def _check_even_head_dim(head_dim: int) -> None:
    if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise InputError(
            f"rotary embeddings rotate channel pairs, so head_dim={head_dim} must be a positive "
            "even integer; choose d_model and num_heads so that d_model / num_heads is even"
        )
