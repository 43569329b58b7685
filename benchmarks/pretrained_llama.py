"""Llama-family folders in qkv's layers against ``transformers`` on the same weights, in one run.

    python -m benchmarks.pretrained_llama                # --threads 1, 5 rounds
    python -m benchmarks.pretrained_llama --rounds 3 --threads 2

A random Llama (4 layers x 256 wide, 8 query heads, 2 KV heads, SwiGLU 688, vocab 1000) and
the same with Mistral's sliding window of 128 are saved with ``save_pretrained`` and read
by ``qkv.pretrained.load_llama``.  Each contender, side by side:

1. one forward pass over 512 tokens (transformers with its SDPA attention);
2. the same pass returning every layer's attention weights (transformers must run eager
   attention for ``output_attentions``; qkv's ``need_weights=True``);
3. greedy generation of 128 tokens after an 8-token prompt (the token sequences are checked
   identical first).

Contenders take turns round by round (``benchmarks.common.interleaved``); times are medians.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from benchmarks.common import interleaved, machine, table
from qkv.decoding import sample
from qkv.pretrained import load_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VOCAB, LENGTH, PROMPT, NEW_TOKENS = 1000, 512, 8, 128


def random_pair(folder: str, family: str):
    """(transformers model, qkv model) of one random checkpoint, both in eval mode."""
    import transformers

    sizes = dict(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=None,
    )
    if family == "mistral":
        config = transformers.MistralConfig(sliding_window=128, **sizes)
        reference = transformers.MistralForCausalLM(config)
    else:
        reference = transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes))
    reference.save_pretrained(folder)
    return reference.eval(), load_llama(folder).model


@torch.no_grad()
def rows_for(family: str, rounds: int) -> list[list[object]]:
    with tempfile.TemporaryDirectory() as folder:
        reference, ours = random_pair(folder, family)
    ids = torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    prompt = ids[:, :PROMPT]

    def theirs_generate():
        return reference.generate(
            prompt, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
        )

    def ours_generate():
        return sample(ours, prompt, max_new_tokens=NEW_TOKENS, temperature=0)

    assert torch.equal(theirs_generate(), ours_generate()), "generations differ"

    def theirs_weights():
        reference.config._attn_implementation = "eager"  # noqa: SLF001 - the only way
        try:
            return reference(ids, output_attentions=True)
        finally:
            reference.config._attn_implementation = "sdpa"  # noqa: SLF001

    reference.config._attn_implementation = "sdpa"  # noqa: SLF001
    runs = {
        "forward": (lambda: reference(ids), lambda: ours(ids)),
        "forward + weights": (theirs_weights, lambda: ours(ids, need_weights=True)),
        f"generate {NEW_TOKENS}": (theirs_generate, ours_generate),
    }
    rows = []
    for name, (theirs, mine) in runs.items():
        times = interleaved({"transformers": theirs, "qkv": mine}, rounds=rounds)
        ratio = times["transformers"] / times["qkv"]
        rows.append([family, name, times["transformers"], times["qkv"], ratio])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine())
    rows = rows_for("llama", args.rounds) + rows_for("mistral", args.rounds)
    headers = ["model", "what", "transformers s", "qkv s", "transformers / qkv"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
