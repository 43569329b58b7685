"""Attention speed and memory, every implementation side by side in one run.

    python -m benchmarks.attention            # full table, T = 256 ... 8192 (about 15 min)
    python -m benchmarks.attention --quick    # T = 256 ... 1024

fp32, B=1, H=8, Dh=64, causal and not: forward and forward+backward time, achieved GFLOP/s
and peak extra memory of qkv ``auto``/``reference``/``chunked`` against PyTorch's
``scaled_dot_product_attention`` and a naive three-line implementation; then
``torch.nn.MultiheadAttention`` against qkv's ``MultiHeadAttention`` (d_model 512, 8 heads).
"""

from __future__ import annotations

import argparse
import functools
import math

import torch
import torch.nn.functional as F

import qkv
from benchmarks.common import interleaved, machine, matmul_gflops, peak_memory_mib, table

HEADS, HEAD_DIM = 8, 64


def naive(q, k, v, causal):
    """The three lines from the textbook (plus the causal mask)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~qkv.causal_mask(q.shape[-2], device=q.device), float("-inf"))
    return torch.softmax(scores, -1) @ v


IMPLEMENTATIONS = {
    "torch sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    "naive": naive,
    "qkv auto": lambda q, k, v, causal: qkv.attention(q, k, v, causal=causal).output,
    "qkv reference": lambda q, k, v, causal: (
        qkv.attention(q, k, v, causal=causal, backend="reference").output
    ),
    "qkv chunked": lambda q, k, v, causal: (
        qkv.attention(q, k, v, causal=causal, backend="chunked").output
    ),
}


def _inputs(length: int, grad: bool):
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(1, HEADS, length, HEAD_DIM, generator=gen, requires_grad=grad) for _ in range(3)
    ]


def _forward_backward(name: str, length: int, causal: bool):
    q, k, v = _inputs(length, grad=True)
    grad = torch.randn(1, HEADS, length, HEAD_DIM)
    fn = IMPLEMENTATIONS[name]

    def run():
        out = fn(q, k, v, causal)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    return run


def _forward(name: str, length: int, causal: bool):
    q, k, v = _inputs(length, grad=False)
    fn = IMPLEMENTATIONS[name]

    def run():
        with torch.no_grad():
            fn(q, k, v, causal)

    return run


def attention_table(lengths: list[int], memory: bool) -> str:
    rows = []
    for causal in (False, True):
        for length in lengths:
            # two matmuls of T x T x Dh per head; backward does 2.5x the forward's work
            flops = 4 * HEADS * length * length * HEAD_DIM * (0.5 if causal else 1.0)
            # the implementations take turns; T >= 4096 takes seconds per call: one round
            rounds, warmup = (5, True) if length <= 2048 else (1, False)
            fwd = interleaved(
                {name: _forward(name, length, causal) for name in IMPLEMENTATIONS},
                rounds=rounds,
                warmup=warmup,
            )
            both = interleaved(
                {name: _forward_backward(name, length, causal) for name in IMPLEMENTATIONS},
                rounds=rounds,
                warmup=warmup,
            )
            for name in IMPLEMENTATIONS:
                mem = None
                if memory and not causal:
                    mem = peak_memory_mib(
                        functools.partial(_forward_backward, name, length, causal)
                    )
                rows.append(
                    [
                        "yes" if causal else "no",
                        length,
                        name,
                        fwd[name] * 1e3,
                        flops / fwd[name] / 1e9,
                        both[name] * 1e3,
                        3.5 * flops / both[name] / 1e9,
                        both[name] / both["torch sdpa"],
                        mem,
                    ]
                )
                print(
                    f"  causal={causal} T={length} {name}: fwd {fwd[name] * 1e3:.1f} ms, "
                    f"fwd+bwd {both[name] * 1e3:.1f} ms, mem {mem}",
                    flush=True,
                )
    headers = [
        "causal",
        "T",
        "implementation",
        "fwd ms",
        "fwd GFLOP/s",
        "fwd+bwd ms",
        "fwd+bwd GFLOP/s",
        "fwd+bwd / sdpa",
        "peak MiB (fwd+bwd)",
    ]
    return table(headers, rows)


def auto_overhead_table(lengths: list[int], rounds: int = 11) -> str:
    """qkv ``auto`` against SDPA with the measurements interleaved (A B A B ...), so drift
    on a shared machine falls on both alike: what qkv's dispatch and checks cost."""

    rows = []
    for causal in (False, True):
        for length in lengths:
            runs = {
                "torch sdpa": _forward_backward("torch sdpa", length, causal),
                "qkv auto": _forward_backward("qkv auto", length, causal),
            }
            sdpa, auto = interleaved(runs, rounds=rounds).values()
            rows.append(["yes" if causal else "no", length, sdpa * 1e3, auto * 1e3, auto / sdpa])
    headers = ["causal", "T", "sdpa fwd+bwd ms", "qkv auto fwd+bwd ms", "auto / sdpa"]
    return (
        f"interleaved, median of {rounds}\n\n"
        + table(headers, rows)
        + f"\n\nqkv's checks and dispatch per call: {dispatch_overhead_us():.1f} us "
        "(forward, a (1, 8, 16, 64) input, where the kernel itself is tiny)"
    )


def dispatch_overhead_us(calls: int = 3000, rounds: int = 5) -> float:
    """Microseconds ``qkv.attention`` adds to a direct SDPA call: both timed on an input so
    small that the kernel costs little, median of interleaved rounds of ``calls`` calls."""
    q = torch.randn(1, HEADS, 16, HEAD_DIM)

    def many(fn):
        def run():
            with torch.no_grad():
                for _ in range(calls):
                    fn(q, q, q, True)

        return run

    times = interleaved(
        {name: many(IMPLEMENTATIONS[name]) for name in ("torch sdpa", "qkv auto")}, rounds=rounds
    )
    return (times["qkv auto"] - times["torch sdpa"]) / calls * 1e6


def multihead_table(
    batch: int = 8, length: int = 256, d_model: int = 512, heads: int = 8, rounds: int = 15
) -> str:
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
    ours = qkv.MultiHeadAttention.from_torch(reference)
    x = torch.randn(batch, length, d_model, requires_grad=True)
    grad = torch.randn(batch, length, d_model)

    def step(module, need_weights, causal):
        def run():
            if module is reference:
                mask = (
                    qkv.causal_mask(length).logical_not() if causal else None
                )  # PyTorch: True = blocked
                out, _ = reference(
                    x, x, x, need_weights=need_weights, attn_mask=mask, average_attn_weights=False
                )
            else:
                out, _ = ours(x, need_weights=need_weights, causal=causal)
            out.backward(grad)
            x.grad = None
            for p in module.parameters():
                p.grad = None

        return run

    rows = []
    for causal in (False, True):
        for need_weights in (False, True):
            runs = {
                "torch": step(reference, need_weights, causal),
                "qkv": step(ours, need_weights, causal),
            }
            t_ref, t_ours = interleaved(runs, rounds=rounds).values()
            rows.append(
                [
                    "yes" if causal else "no",
                    "yes" if need_weights else "no",
                    t_ref * 1e3,
                    t_ours * 1e3,
                    t_ours / t_ref,
                ]
            )
    headers = [
        "causal",
        "need_weights",
        "nn.MultiheadAttention ms",
        "qkv MultiHeadAttention ms",
        "qkv / torch",
    ]
    return (
        f"forward+backward, B={batch}, T={length}, d_model={d_model}, {heads} heads, interleaved, median of {rounds}\n\n"
        + table(headers, rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="T = 256..1024 only")
    parser.add_argument("--lengths", type=int, nargs="*", help="sequence lengths to measure")
    parser.add_argument("--no-memory", action="store_true", help="skip the (slow) peak-memory runs")
    parser.add_argument(
        "--only", choices=["attention", "overhead", "multihead"], help="run one section"
    )
    args = parser.parse_args()
    lengths = args.lengths or (
        [256, 512, 1024] if args.quick else [256, 512, 1024, 2048, 4096, 8192]
    )
    print(f"machine: {machine()}")
    print(f"fp32 matmul ceiling: {matmul_gflops():.0f} GFLOP/s (2048 x 2048)\n", flush=True)
    if args.only in (None, "attention"):
        print(f"## attention, fp32, B=1, H={HEADS}, Dh={HEAD_DIM}\n")
        print(attention_table(lengths, memory=not args.no_memory))
    if args.only in (None, "overhead"):
        print("\n## qkv auto vs SDPA\n")
        print(auto_overhead_table([t for t in lengths if t <= 2048]))
    if args.only in (None, "multihead"):
        print("\n## multi-head attention layer\n")
        print(multihead_table(batch=8, length=256))
        print()
        print(multihead_table(batch=2, length=1024))
        print()
        print(multihead_table(batch=1, length=2048))


if __name__ == "__main__":
    main()
