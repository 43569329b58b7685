"""The picture of docs/results.md: which blocks of attention the flex kernel runs for the
sliding window and packed documents at T = 2,048, blocks of 128.

    python -m benchmarks.block_mask_picture --out docs/img/block-masks.png

Three masks: causal (for scale), the causal sliding window of 256, and 16 causal packed
documents of 128 tokens each.  Every block is full (run without a mask), partial (mask_mod
evaluated per element) or skipped (never computed, forward or backward).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from qkv.functional.block_mask import and_masks, create_block_mask
from qkv.functional.patterns import causal, document, sliding_window
from qkv.plotting.block_masks import plot_block_masks

LENGTH, BLOCK, WINDOW, DOCUMENTS = 2048, 128, 256, 16


def masks() -> dict:
    ids = torch.arange(LENGTH) // (LENGTH // DOCUMENTS)  # (T,) document of each position
    patterns = {
        "causal": causal,
        f"sliding window {WINDOW}": sliding_window(WINDOW),
        f"{DOCUMENTS} packed documents, causal": and_masks(causal, document(ids)),
    }
    return {
        name: create_block_mask(mod, None, None, LENGTH, LENGTH, BLOCK_SIZE=BLOCK)
        for name, mod in patterns.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img/block-masks.png"))
    args = parser.parse_args()
    built = masks()
    for name, block_mask in built.items():
        print(f"{name}: {block_mask.sparsity():.1f}% skipped")
    print(f"wrote {plot_block_masks(built, args.out)}")


if __name__ == "__main__":
    main()
