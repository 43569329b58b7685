"""Mistral-style sliding windows, before and after they moved onto the flex kernel.

    python -m benchmarks.lm_window_pretrained [--length 4096] [--threads 1]

A random Mistral-shaped model (the ``llama`` architecture: 2 layers, width 256, 4 heads, 2 KV
heads, SwiGLU 512, vocab 512, window 256), one training step (forward + backward) on a
batch of one sequence of ``--length`` tokens, two ways, taking turns in one process:

- **flex** (qkv now): every window is a block mask, so the kernel skips the blocks outside it;
- **dense mask** (qkv before, when Llama-family folders had their own model): the window as a
  (T, T) boolean mask through PyTorch's fused SDPA kernel, which computes every block.

The two compute the same loss (checked to a relative 1e-4) from the same weights.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import interleaved, machine, table
from qkv.models import llama
from qkv.models.lm_masks import attention_masks


def dense_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """The model's loss with each window as a dense boolean mask (the old path)."""
    x = model.embed(ids[:, :-1])
    length = x.shape[1]
    for block, window in zip(model.blocks, model.windows, strict=True):
        mask, _ = attention_masks(
            length=length,
            offset=0,
            first=0,
            window=window,
            documents=None,
            device=x.device,
            dense=True,
        )
        x = block(x, mask=mask, causal=False).hidden
    logits = model.logits(model.final_norm(x))
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = llama(
        512,
        d_model=256,
        num_heads=4,
        num_kv_heads=2,
        num_layers=2,
        d_ff=512,
        max_len=args.length + 1,
        dropout=0.0,
        window=args.window,
    )
    ids = torch.randint(0, 512, (1, args.length + 1))
    flex_value, dense_value = model.loss(ids).item(), dense_loss(model, ids).item()
    assert abs(flex_value - dense_value) < 1e-4 * dense_value, (flex_value, dense_value)

    def step(loss_fn):
        def run():
            model.zero_grad(set_to_none=True)
            loss_fn().backward()

        return run

    times = interleaved(
        {
            "flex": step(lambda: model.loss(ids)),
            "dense mask": step(lambda: dense_loss(model, ids)),
        },
        rounds=args.rounds,
    )
    print(machine())
    print(
        table(
            ["length", "window", "flex (s)", "dense mask (s)", "speed-up"],
            [
                [
                    args.length,
                    args.window,
                    times["flex"],
                    times["dense mask"],
                    times["dense mask"] / times["flex"],
                ]
            ],
        )
    )


if __name__ == "__main__":
    main()
