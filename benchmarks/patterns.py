"""Attention patterns at the cost of what they attend: qkv.flex_attention side by side with
SDPA and qkv's chunked backend given the equivalent dense mask.

    python -m benchmarks.patterns --threads 1          # all cases (about 15 min, one thread)
    python -m benchmarks.patterns --quick              # T = 4096 only
    python -m benchmarks.patterns --torch-compiled     # also PyTorch's compiled flex forward

fp32, B=1, H=8, Dh=64, forward+backward.  Cases: a causal sliding window of 256 at
T = 4096 / 8192 / 16384; 16 documents of 512 in T = 8192; causal through a mask_mod
against SDPA ``is_causal``; no mask against SDPA.  Then the peak memory of flex
forward+backward at T = 16384 (window 256) in a fresh process, create_block_mask's time and
memory at 16384 and 65536, and this machine's matmul rate: GFLOP/s counts the attended
scores only, 14 flops per attended (query, key) pair and head dimension (forward 4 -- q.k
and p.v -- and backward 2.5 times that, FlashAttention's convention).
"""

from __future__ import annotations

import argparse
import ctypes
import time

import torch
import torch.nn.functional as F

import qkv
from benchmarks.common import interleaved, machine, matmul_gflops, peak_memory_mib, table
from qkv.functional import patterns as P

HEADS, HEAD_DIM, WINDOW = 8, 64, 256
#: SDPA and chunked with a dense mask compute all T^2 scores: at 16384 one
#: forward+backward takes minutes on one thread; their ratio is measured at 4096 and 8192.
DENSE_UP_TO = 8192


def _inputs(length: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(1, HEADS, length, HEAD_DIM, generator=gen).requires_grad_() for _ in range(3)
    ]


def _train_step(attend, q, k, v):
    def step():
        for t in (q, k, v):
            t.grad = None
        attend(q, k, v).sum().backward()

    return step


def _dense(mask_mod, length: int) -> torch.Tensor:
    i = torch.arange(length)
    return mask_mod(0, 0, i[:, None], i[None, :])


def contenders(name: str, mask_mod, length: int, args) -> dict:
    """The runs of one case and the number of attended (query, key) pairs per head."""
    q, k, v = _inputs(length)
    start = time.perf_counter()
    block_mask = qkv.create_block_mask(mask_mod, None, None, length, length)
    build = time.perf_counter() - start
    runs = {
        "qkv flex": _train_step(
            lambda q, k, v: qkv.flex_attention(q, k, v, block_mask=block_mask), q, k, v
        )
    }
    dense = _dense(mask_mod, length)
    attended = int(dense.sum())
    if length <= DENSE_UP_TO:
        runs["sdpa dense mask"] = _train_step(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense), q, k, v
        )
        runs["chunked dense mask"] = _train_step(
            lambda q, k, v: qkv.attention(q, k, v, mask=dense, backend="chunked").output, q, k, v
        )
    return {
        "runs": runs,
        "attended": attended,
        "build": build,
        "sparsity": block_mask.sparsity(),
        "inputs": (q, k, v),
        "block_mask": block_mask,
    }


def run_case(name: str, mask_mod, length: int, args, extra=None) -> list[list[object]]:
    case = contenders(name, mask_mod, length, args)
    runs = case["runs"]
    if extra:
        runs.update(extra(*case["inputs"]))
    rounds = 3 if length <= 4096 else 1
    times = interleaved(runs, rounds=rounds, warmup=length <= 4096)
    flops = 14 * case["attended"] * HEAD_DIM * HEADS
    flex = times["qkv flex"]
    rows = []
    for contender, seconds in times.items():
        rows.append(
            [name, length, contender, seconds, flex and seconds / flex, flops / seconds / 1e9]
        )
    if length > DENSE_UP_TO:
        rows.append(
            [
                name,
                length,
                "sdpa / chunked dense mask",
                None,
                None,
                "skipped: T^2 work, minutes per step",
            ]
        )
    print(
        f"  {name} T={length}: block mask built in {case['build']:.2f} s, sparsity {case['sparsity']:.1f}%",
        flush=True,
    )
    return rows


def torch_flex_forward(mask_mod, length: int, compiled: bool):
    """PyTorch's own flex_attention, forward without grad (it has no CPU backward)."""
    from torch.nn.attention import flex_attention as torch_flex

    block_mask = torch_flex.create_block_mask(mask_mod, None, None, length, length, device="cpu")
    attend = torch.compile(torch_flex.flex_attention) if compiled else torch_flex.flex_attention

    def runs(q, k, v):
        def forward():
            with torch.no_grad():
                attend(q.detach(), k.detach(), v.detach(), block_mask=block_mask)

        name = "torch flex fwd only (" + ("compiled" if compiled else "eager") + ")"
        return {name: forward}

    return runs


def _memory_target():
    q, k, v = _inputs(16384)
    block_mask = qkv.create_block_mask(P.sliding_window(WINDOW), None, None, 16384, 16384)
    # glibc keeps the memory the build freed; hand it back so the baseline is what is held
    ctypes.CDLL("libc.so.6").malloc_trim(0)

    def step():
        qkv.flex_attention(q, k, v, block_mask=block_mask).sum().backward()

    return step


def _build_target(length: int):
    def target():
        return lambda: qkv.create_block_mask(P.sliding_window(WINDOW), None, None, length, length)

    return target


def _build_16384():
    return _build_target(16384)()


def _build_65536():
    return _build_target(65536)()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="T = 4096 only")
    parser.add_argument(
        "--torch-compiled",
        action="store_true",
        help="also time torch.compile(flex_attention) forward (compiles for minutes here)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(machine())
    ceiling = matmul_gflops()
    print(
        f"matmul ceiling: {ceiling:.1f} GFLOP/s (2048^2 fp32, {args.threads} threads)\n", flush=True
    )
    lengths = [4096] if args.quick else [4096, 8192, 16384]
    rows = []
    window = P.sliding_window(WINDOW)
    for length in lengths:
        extra = torch_flex_forward(window, length, False) if length == 4096 else None
        if args.torch_compiled and length == 4096:
            eager, compiled = extra, torch_flex_forward(window, length, True)
            extra = lambda q, k, v, e=eager, c=compiled: {**e(q, k, v), **c(q, k, v)}  # noqa: E731
        rows += run_case(f"window {WINDOW}", window, length, args, extra)
    ids = torch.arange(8192 if not args.quick else 4096) // 512
    rows += run_case(
        "16 documents of 512" if not args.quick else "8 documents of 512",
        P.document(ids),
        len(ids),
        args,
    )
    for length in lengths[:2]:
        q, k, v = _inputs(length)
        causal_block = qkv.create_block_mask(P.causal, None, None, length, length)
        runs = {
            "qkv flex causal mask_mod": _train_step(
                lambda q, k, v, m=causal_block: qkv.flex_attention(q, k, v, block_mask=m), q, k, v
            ),
            "sdpa is_causal": _train_step(
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v
            ),
            "qkv flex no mask": _train_step(lambda q, k, v: qkv.flex_attention(q, k, v), q, k, v),
            "sdpa no mask": _train_step(
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v
            ),
        }
        times = interleaved(runs, rounds=3 if length <= 4096 else 1, warmup=length <= 4096)
        causal_flops = 14 * length * (length + 1) // 2 * HEAD_DIM * HEADS
        full_flops = 14 * length * length * HEAD_DIM * HEADS
        for name, seconds in times.items():
            ratio = seconds / (
                times["sdpa is_causal"] if "causal" in name else times["sdpa no mask"]
            )
            flops = causal_flops if "causal" in name else full_flops
            rows.append(["causal / no mask", length, name, seconds, ratio, flops / seconds / 1e9])
    print(
        table(
            ["case", "T", "contender", "fwd+bwd s", "x qkv flex (or x sdpa)", "GFLOP/s attended"],
            rows,
        )
    )
    print(f"\nmatmul ceiling {ceiling:.1f} GFLOP/s; 40% of it is {0.4 * ceiling:.1f}")
    q_mib = 16384 * HEADS * HEAD_DIM * 4 / 2**20
    peak = peak_memory_mib(_memory_target)
    beyond = None if peak is None else peak - 4 * q_mib  # the output and three gradients
    print(
        f"\npeak extra memory, flex fwd+bwd T=16384 window {WINDOW}: {peak:.0f} MiB; beyond output and gradients {beyond:.0f} MiB = {beyond / q_mib:.2f} x size of q ({q_mib:.0f} MiB)"
    )
    for length, target in ((16384, _build_16384), (65536, _build_65536)):
        start = time.perf_counter()
        qkv.create_block_mask(P.sliding_window(WINDOW), None, None, length, length)
        seconds = time.perf_counter() - start
        memory = peak_memory_mib(target)
        print(
            f"create_block_mask T={length} window {WINDOW}: {seconds:.2f} s, peak extra memory {memory:.0f} MiB"
        )


if __name__ == "__main__":
    main()
