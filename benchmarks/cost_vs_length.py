"""Cost against length: the Transformer against the RNN with attention, at equal parameters.

    python -m benchmarks.cost_vs_length --threads 1 --plot docs/img/cost-vs-length.png
    python -m benchmarks.cost_vs_length --lengths 10,30,100 --repeats 1     # a quick look

Self-attention costs O(n^2) in the sentence length n but runs all positions at once; a
recurrent encoder-decoder costs O(n) but walks the positions one after another.  This times,
for each source length n, on random token ids (speed does not depend on training):

- one training step: forward on a batch of ``--batch`` sources of n tokens and targets of
  n tokens (teacher forcing), label-smoothed cross-entropy, backward, AdamW step (the step of
  ``benchmarks.training``);
- one greedy decode of the same sources for a fixed ``--decode-steps`` tokens (EOS barred,
  so every sentence runs exactly that many steps): the encoder once, then per step attention
  over the n source positions (and, for the Transformer, over its own cached prefix).

The models: the small Transformer (``TransformerConfig.small``, 2+2 pre-LN blocks,
d_model 96, 4 heads, d_ff 384, tied output layer) and ``rnn-attention`` with the additive
score (Bahdanau: bidirectional GRU encoder, GRU decoder), its embedding width equal to
d_model and its hidden width chosen so the parameter counts match (printed).  No dropout in
either.  Within each length the four runs take turns (``benchmarks.common.interleaved``),
median of ``--repeats`` rounds after one warm-up each.  A crossing point is where the
Transformer / RNN time ratio passes 1, interpolated on log-log axes between the two lengths
around it (every one is printed).

Both costs grow faster than n for both models: the additive RNN decoder also attends over
all n source states at each of its n target steps (O(n^2) work, like self-attention), and
for backward it keeps each step's (B, n, attention_dim) score activations; what differs is
that the Transformer does that work in a few large matrix products, the RNN in n small
sequential steps.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import interleaved, machine, table
from benchmarks.decoding import CachedDecoder
from benchmarks.train_steps import make_step
from qkv.data.batch import BOS_ID, EOS_ID, Batch
from qkv.decoding import greedy_search
from qkv.models.registry import build_model
from qkv.models.rnn_config import RNNConfig
from qkv.models.transformer import Transformer, TransformerConfig
from qkv.training.config import TrainConfig
from qkv.training.optimizer import make_optimizer

SPECIAL_IDS = 4  # PAD, BOS, EOS, UNK: random tokens are drawn above them
MODELS = ("transformer", "rnn-attention")


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_models(vocab: int, seed: int) -> dict[str, nn.Module]:
    """The small Transformer and an additive ``rnn-attention`` with as many parameters:
    the RNN's hidden width is the smallest whose count reaches the Transformer's, or the
    one below it if that is closer."""
    torch.manual_seed(seed)
    transformer = Transformer(TransformerConfig.small(vocab, max_len=1024))
    target = parameter_count(transformer)
    width = transformer.config.d_model

    def rnn(hidden: int) -> nn.Module:
        config = RNNConfig(
            vocab, embedding_dim=width, hidden_dim=hidden, attention="additive", dropout=0.0
        )
        torch.manual_seed(seed)
        return build_model("rnn-attention", config)

    low, high = 1, 4 * width
    while parameter_count(rnn(high)) < target:
        high *= 2
    while high - low > 1:  # bisect: the count grows with the hidden width
        middle = (low + high) // 2
        low, high = (middle, high) if parameter_count(rnn(middle)) < target else (low, middle)
    closest = min((low, high), key=lambda h: abs(parameter_count(rnn(h)) - target))
    return {"transformer": transformer, "rnn-attention": rnn(closest)}


def make_batch(batch: int, length: int, vocab: int, seed: int) -> Batch:
    """``batch`` sources of ``length`` random ids; targets BOS + ``length`` ids + EOS, so the
    decoder reads ``length`` tokens under teacher forcing.  No padding."""
    generator = torch.Generator().manual_seed(seed + length)
    source = torch.randint(SPECIAL_IDS, vocab, (batch, length), generator=generator)
    words = torch.randint(SPECIAL_IDS, vocab, (batch, length), generator=generator)
    bos = torch.full((batch, 1), BOS_ID)
    target = torch.cat([bos, words, torch.full((batch, 1), EOS_ID)], dim=1)
    return Batch(source, target, torch.arange(batch))


def runs_for(
    models: dict[str, nn.Module], batch: Batch, decode_steps: int
) -> dict[tuple[str, str], Callable[[], object]]:
    """For each model, a training step and a greedy decode on ``batch``."""
    runs: dict[tuple[str, str], Callable[[], object]] = {}
    for name, model in models.items():
        train = make_step(
            model,
            lambda b, model=model: model(b.source, b.target_input).logits,
            make_optimizer(model, TrainConfig()),
        )
        runs[name, "train"] = lambda model=model, train=train: (model.train(), train(batch))
        decoder = CachedDecoder(model)  # start / step with EOS barred: exactly decode_steps

        def decode(model: nn.Module = model, decoder: CachedDecoder = decoder) -> object:
            model.eval()
            return greedy_search(decoder, batch.source, max_len=decode_steps)

        runs[name, "decode"] = decode
    return runs


def crossing(lengths: list[int], ratios: list[float]) -> str:
    """Every length where the Transformer / RNN ratio passes 1, interpolated in log-log
    between the two measured lengths around it."""
    found = []
    for (n0, r0), (n1, r1) in zip(zip(lengths, ratios), zip(lengths[1:], ratios[1:])):
        if (r0 - 1) * (r1 - 1) <= 0 and r0 != r1:
            fraction = math.log(r0) / (math.log(r0) - math.log(r1))
            at = math.exp(math.log(n0) + fraction * (math.log(n1) - math.log(n0)))
            cheaper = "transformer" if r0 < 1 else "rnn-attention"
            found.append(f"about n = {at:.0f} ({cheaper} cheaper below it)")
    if found:
        return "; ".join(found)
    cheaper = "transformer" if ratios[0] < 1 else "rnn-attention"
    return f"none between {lengths[0]} and {lengths[-1]} ({cheaper} cheaper throughout)"


def plot(lengths: list[int], times: dict[tuple[str, str], list[float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    titles = {"train": "one training step", "decode": "one greedy decode"}
    for axis, (kind, title) in zip(axes, titles.items()):
        for name in MODELS:
            axis.plot(lengths, times[name, kind], marker="o", label=name)
        axis.set(xscale="log", yscale="log", title=title, xlabel="source length (tokens)")
        axis.set_ylabel("ms (median)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="10,30,100,200,300,500,1000", help="source lengths")
    parser.add_argument("--batch", type=int, default=8, help="sentences per step")
    parser.add_argument("--decode-steps", type=int, default=20, help="greedy tokens per decode")
    parser.add_argument("--repeats", type=int, default=11, help="timed rounds per length")
    parser.add_argument("--vocab", type=int, default=1000, help="vocabulary size (both sides)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--plot", help="PNG file for the two log-log plots")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        lengths = sorted({int(n) for n in args.lengths.split(",")})
    except ValueError:
        parser.error(f"--lengths must be comma-separated integers, got {args.lengths!r}")
    if lengths[0] < 1:
        parser.error("--lengths must be positive")
    for name in ("batch", "decode_steps", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.vocab <= SPECIAL_IDS:
        parser.error(f"--vocab must exceed the {SPECIAL_IDS} special ids")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    models = build_models(args.vocab, args.seed)
    counts = {name: parameter_count(model) for name, model in models.items()}
    rnn_config = models["rnn-attention"].config
    print(f"machine: {machine()}")
    print(
        f"parameters: transformer {counts['transformer']:,} (small: d_model 96, 2+2 pre-LN "
        f"blocks); rnn-attention {counts['rnn-attention']:,} (additive, GRU, embedding "
        f"{rnn_config.embedding_dim}, hidden {rnn_config.hidden_dim}); ratio "
        f"{counts['rnn-attention'] / counts['transformer']:.3f}; vocab {args.vocab}"
    )
    print(
        f"batch {args.batch} sentences; training step: target length = source length; "
        f"greedy decode: {args.decode_steps} tokens (EOS barred); median of {args.repeats} "
        "interleaved rounds\n",
        flush=True,
    )
    times: dict[tuple[str, str], list[float]] = {
        (name, kind): [] for name in MODELS for kind in ("train", "decode")
    }
    rows = []
    for length in lengths:
        batch = make_batch(args.batch, length, args.vocab, args.seed)
        medians = interleaved(runs_for(models, batch, args.decode_steps), rounds=args.repeats)
        for key, seconds in medians.items():
            times[key].append(seconds * 1e3)
        row = [length]
        for kind in ("train", "decode"):
            ours, theirs = (medians[name, kind] * 1e3 for name in MODELS)
            row += [ours, theirs, ours / theirs]
        rows.append(row)
        print(f"  n = {length}: done", flush=True)
    headers = ["n"]
    for kind in ("train step", "greedy decode"):
        headers += [f"{kind}: transformer ms", "rnn-attention ms", "ratio"]
    print("\n" + table(headers, rows) + "\n")
    for kind, column in (("training step", 3), ("greedy decode", 6)):
        print(f"crossing, {kind}: {crossing(lengths, [row[column] for row in rows])}")
    if args.plot:
        plot(lengths, times, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
