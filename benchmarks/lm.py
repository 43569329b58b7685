"""The language model's speed, side by side with its peers, in one run.

    python -m benchmarks.lm                 # everything, one thread then default threads
    python -m benchmarks.lm --rounds 3      # fewer rounds (noisier)
    python -m benchmarks.lm --only train    # one table: train | sample | gpt2 | gqa

1. Training tokens/s: qkv's ``DecoderLM`` against a plain PyTorch GPT written here (one
   fused QKV linear, ``F.scaled_dot_product_attention(is_causal=True)``, pre-LN, tied
   embeddings, learned positions) of the same shape and the same weights (copied across,
   logits checked equal), at 4 layers x 128 wide x context 64 and 6 x 384 x 256.  One step =
   forward, cross-entropy, backward, AdamW; batches of 16 random sequences.
2. Sampling 512 new tokens after a 4-token prompt, batch 1 and 8: with the KV cache against
   without it (every step reruns the whole sequence).
3. The same greedy generation against ``transformers``' ``GPT2LMHeadModel.generate`` on the
   same weights (a random GPT-2 saved with ``save_pretrained`` and read by ``load_gpt2``;
   the token sequences are checked identical).
4. Grouped KV heads: the KV cache's bytes after prompt + 512 tokens at batch 8, and the
   sampling time, for num_kv_heads = num_heads (8), num_heads / 4 (2) and 1.

Contenders take turns round by round, in an order that reverses every round
(``benchmarks.common.interleaved``), so a load that comes and goes on a shared machine hits
each alike; times are medians.  A training turn runs as many steps as fill 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.common import interleaved, machine, table
from qkv.decoding import sample
from qkv.models import DecoderLM, LMConfig
from qkv.pretrained import load_gpt2

VOCAB = 256
NEW_TOKENS = 512
PROMPT = 4


class PlainGPT(nn.Module):
    """A GPT as one writes it in plain PyTorch (nanoGPT's shape).  Shapes: (B, T) -> (B, T, V)."""

    def __init__(self, vocab: int, d_model: int, num_heads: int, num_layers: int, max_len: int):
        super().__init__()
        self.num_heads = num_heads
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(PlainBlock(d_model) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids: Tensor) -> Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x, self.num_heads)
        return self.head(self.ln_f(x))


class PlainBlock(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.fc, self.fc_out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x: Tensor, num_heads: int) -> Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, num_heads, D // num_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


def qkv_lm(d_model: int, num_heads: int, num_layers: int, max_len: int, **extra) -> DecoderLM:
    config = LMConfig(
        VOCAB,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=4 * d_model,
        max_len=max_len,
        dropout=0.0,
        **extra,
    )
    return DecoderLM(config)


@torch.no_grad()
def copy_into_plain(ours: DecoderLM, plain: PlainGPT) -> None:
    plain.wte.weight.copy_(ours.token_embedding.weight)
    plain.wpe.weight.copy_(ours.positions.embedding.weight)
    plain.ln_f.load_state_dict(ours.final_norm.state_dict())
    for block, theirs in zip(ours.blocks, plain.blocks, strict=True):
        attention = block.self_attention
        theirs.qkv.weight.copy_(attention.in_proj_weight)  # both stack Q, K, V
        theirs.qkv.bias.copy_(attention.in_proj_bias)
        theirs.proj.load_state_dict(attention.out_proj.state_dict())
        theirs.ln_1.load_state_dict(block.self_attention_norm.state_dict())
        theirs.ln_2.load_state_dict(block.feed_forward_norm.state_dict())
        theirs.fc.load_state_dict(block.feed_forward.expand.state_dict())
        theirs.fc_out.load_state_dict(block.feed_forward.contract.state_dict())


def training_row(num_layers: int, d_model: int, context: int, rounds: int) -> list:
    torch.manual_seed(0)
    ours = qkv_lm(d_model, d_model // 64, num_layers, context)
    plain = PlainGPT(VOCAB, d_model, d_model // 64, num_layers, context)
    copy_into_plain(ours, plain)
    ids = torch.randint(0, VOCAB, (16, context + 1))
    torch.testing.assert_close(ours(ids[:, :-1]).logits, plain(ids[:, :-1]), atol=1e-4, rtol=0)

    def step_of(model: nn.Module, logits_of):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step() -> None:
            logits = logits_of(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    steps = {"qkv": step_of(ours, lambda x: ours(x).logits), "plain": step_of(plain, plain)}
    # A turn is several steps when one is short (0.3 s or more a turn): single steps of a few
    # tens of milliseconds are at the mercy of the scheduler.
    start = time.perf_counter()
    steps["plain"]()
    repeats = max(1, round(0.3 / (time.perf_counter() - start)))
    runs = {name: _repeated(step, repeats) for name, step in steps.items()}
    times = interleaved(runs, rounds=rounds)
    tokens = ids[:, 1:].numel() * repeats
    qkv_rate, plain_rate = tokens / times["qkv"], tokens / times["plain"]
    return [f"{num_layers} x {d_model} x {context}", qkv_rate, plain_rate, qkv_rate / plain_rate]


def _repeated(step, times: int):
    def run() -> None:
        for _ in range(times):
            step()

    return run


def training_table(rounds: int) -> str:
    rows = [training_row(*shape, rounds) for shape in ((4, 128, 64), (6, 384, 256))]
    headers = ["layers x width x context", "qkv tok/s", "plain GPT tok/s", "qkv / plain"]
    return table(headers, rows)


def random_gpt2(folder: str):
    import transformers

    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=1024,
        n_embd=128,
        n_layer=4,
        n_head=4,
        bos_token_id=None,
        eos_token_id=None,  # no early stop: both generate exactly NEW_TOKENS
    )
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(folder, safe_serialization=True)
    return reference, load_gpt2(folder).model


def sampling_rows(reference, ours: DecoderLM, batch: int, rounds: int) -> tuple[list, list]:
    prompt = torch.randint(0, VOCAB, (batch, PROMPT), generator=torch.Generator().manual_seed(1))

    def ours_greedy(use_cache: bool = True) -> Tensor:
        return sample(ours, prompt, max_new_tokens=NEW_TOKENS, temperature=0, use_cache=use_cache)

    @torch.no_grad()
    def theirs_greedy() -> Tensor:
        return reference.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )

    same = torch.equal(ours_greedy(), theirs_greedy())
    cached = interleaved({"qkv": ours_greedy, "transformers": theirs_greedy}, rounds=rounds)
    # without the cache a run costs O(length^2): one round, no warm-up
    uncached = interleaved({"off": lambda: ours_greedy(False)}, rounds=1, warmup=False)["off"]
    cache_row = [batch, cached["qkv"], uncached, uncached / cached["qkv"]]
    speed_up = cached["transformers"] / cached["qkv"]
    return cache_row, [batch, cached["qkv"], cached["transformers"], speed_up, same]


def sampling_tables(rounds: int) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        reference, ours = random_gpt2(folder)
        rows = [sampling_rows(reference, ours, batch, rounds) for batch in (1, 8)]
    cache = table(
        ["batch", "with cache s", "without cache s", "speed-up"], [row[0] for row in rows]
    )
    gpt2 = table(
        ["batch", "qkv s", "transformers s", "qkv speed-up", "same tokens"],
        [row[1] for row in rows],
    )
    return cache, gpt2


def gqa_table(rounds: int) -> str:
    rows, runs, sizes = [], {}, {}
    batch = 8
    prompt = torch.randint(0, VOCAB, (batch, PROMPT), generator=torch.Generator().manual_seed(2))
    for kv in (8, 2, 1):
        torch.manual_seed(0)
        model = qkv_lm(256, 8, 4, 1024, num_kv_heads=kv).eval()
        state = model.start(prompt[:, :-1])
        tokens = prompt[:, -1]
        for _ in range(NEW_TOKENS + 1):  # the cache ends holding prompt + 512 positions
            output = model.step(tokens, state)
            tokens = output.log_probs.argmax(-1)
        sizes[kv] = sum(c.key.nbytes + c.value.nbytes for c in state.caches) / 2**20
        runs[kv] = lambda model=model: sample(
            model, prompt, max_new_tokens=NEW_TOKENS, temperature=0
        )
    times = interleaved(runs, rounds=rounds)
    for kv in (8, 2, 1):
        rows.append([kv, sizes[kv], times[kv], times[8] / times[kv]])
    return table(["num_kv_heads (of 8)", "KV cache MiB", "sampling s", "speed-up"], rows)


def main() -> None:
    global NEW_TOKENS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["train", "sample", "gqa"], help="one part only")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="default: 512")
    parser.add_argument("--threads", type=int, help="only this many threads (default: 1, then all)")
    args = parser.parse_args()
    NEW_TOKENS = args.new_tokens
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    default_threads = torch.get_num_threads()
    counts = (args.threads,) if args.threads else (1, default_threads)
    for threads in dict.fromkeys(counts):
        torch.set_num_threads(threads)
        print(f"\n## {threads} thread(s) — {machine()}\n")
        if args.only in (None, "train"):
            print("Training (tokens/s, batch 16):\n")
            print(training_table(args.rounds))
        if args.only in (None, "sample"):
            cache, gpt2 = sampling_tables(args.rounds)
            print(f"\nSampling {NEW_TOKENS} new tokens (greedy), KV cache on and off:\n")
            print(cache)
            print(f"\nGreedy generation of {NEW_TOKENS} tokens vs transformers GPT2LMHeadModel:\n")
            print(gpt2)
        if args.only in (None, "gqa"):
            print(f"\nGrouped KV heads (4 x 256, 8 heads, batch 8, {NEW_TOKENS} new tokens):\n")
            print(gqa_table(args.rounds))


if __name__ == "__main__":
    main()
