"""PyTorch's own BlockMask in qkv.flex_attention: as fast as qkv's mask of the same pattern.

    python -m benchmarks.flex_dropin --threads 1
    python -m benchmarks.flex_dropin --threads 2 --sdpa      # also SDPA with the dense mask

Code written against ``torch.nn.attention.flex_attention`` builds its masks with PyTorch's
``create_block_mask``; qkv.flex_attention reads that mask's block lists (once per mask
object) and skips the same blocks.  For a causal sliding window of 256 and 16 causal
documents of 512 at T = 8192 (fp32, B=1, H=8, Dh=64, forward+backward), the two masks --
PyTorch's and qkv's, BLOCK_SIZE 128 both -- take turns round by round in one process
(``benchmarks.common.interleaved``); the ratio is PyTorch-mask time over qkv-mask time.
The first call with PyTorch's mask (reading its lists and planning the walk) is timed
apart, and ``--sdpa`` adds SDPA given the equivalent dense boolean mask.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import flex_attention as torch_flex

import qkv
from benchmarks.common import interleaved, machine, table
from qkv.functional import patterns as P

HEADS, HEAD_DIM = 8, 64


def cases(length: int) -> dict:
    documents = torch.arange(length) // 512
    return {
        "window 256": P.sliding_window(256),
        f"{length // 512} documents of 512": qkv.and_masks(P.causal, P.document(documents)),
    }


def train_step(block_mask, q, k, v, attend=None):
    """One forward+backward of qkv.flex_attention with ``block_mask`` (or ``attend``)."""
    attend = attend or (lambda q, k, v: qkv.flex_attention(q, k, v, block_mask=block_mask))

    def step():
        for t in (q, k, v):
            t.grad = None
        attend(q, k, v).sum().backward()

    return step


def measure(name: str, mask_mod, length: int, rounds: int, sdpa: bool) -> list:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, HEADS, length, HEAD_DIM, generator=gen).requires_grad_() for _ in "qkv"
    )
    ours = qkv.create_block_mask(mask_mod, None, None, length, length, device="cpu")
    theirs = torch_flex.create_block_mask(mask_mod, None, None, length, length, device="cpu")
    start = time.perf_counter()
    train_step(theirs, q, k, v)()  # reads PyTorch's lists and plans the walk, once
    first = time.perf_counter() - start
    runs = {"qkv mask": train_step(ours, q, k, v), "PyTorch mask": train_step(theirs, q, k, v)}
    if sdpa:
        dense = qkv.create_mask(mask_mod, 1, 1, length, length, device="cpu")
        runs["SDPA dense mask"] = train_step(
            None, q, k, v, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        )
    seconds = interleaved(runs, rounds=rounds)
    ratio = seconds["PyTorch mask"] / seconds["qkv mask"]
    row = [name, length, seconds["qkv mask"], seconds["PyTorch mask"], f"{ratio:.3f}", first]
    if sdpa:
        row.append(f"{seconds['SDPA dense mask'] / seconds['PyTorch mask']:.1f}")
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--length", type=int, default=8192, help="sequence length T")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument("--sdpa", action="store_true", help="also SDPA with the dense mask")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    print(machine())
    headers = ["case", "T", "qkv mask s", "PyTorch mask s", "ratio", "first call s"]
    headers += ["x SDPA dense mask"] if args.sdpa else []
    rows = [
        measure(name, mask_mod, args.length, args.rounds, args.sdpa)
        for name, mask_mod in cases(args.length).items()
    ]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
