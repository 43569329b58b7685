"""Beam 4 against greedy, end to end, on trained translators: long test sentences.

    python -m benchmarks.beam_vs_greedy runs/bible3k-rnn-additive runs/bible3k-rnn --threads 1
    python -m benchmarks.beam_vs_greedy runs/bible3k-rnn-additive runs/bible3k-rnn

Each checkpoint translates the first ``--count`` sentences of ``--data``'s test split whose
source has ``--words`` words (``low-high``), one sentence per call as a user's
``qkv translate`` would, greedy and beam alternating after one warm-up call.  The search is
the library's (``Translator.translate``, exhaustive beam search, as the CLI runs it), so the
time includes the steps each search takes, not only the cost of one step
(``benchmarks.decoding --model rnn`` measures that).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import machine, table
from qkv.data import load_corpus
from qkv.tasks import Translator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoints", nargs="+", help="trained translator run directories")
    parser.add_argument("--data", default="bible-en-es", help="corpus (default: bible-en-es)")
    parser.add_argument("--words", default="45-55", help="source length in words, low-high")
    parser.add_argument("--count", type=int, default=12, help="sentences (default: 12)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        low, high = (int(part) for part in args.words.split("-"))
    except ValueError:
        parser.error(f"--words {args.words!r} must be two whole numbers, low-high (e.g. 45-55)")
    pairs = [p for p in load_corpus(args.data, "test") if low <= len(p.source.split()) <= high]
    pairs = pairs[: args.count]
    if not pairs:
        parser.error(f"no {args.data} test sentence has {args.words} words")
    mean_words = statistics.mean(len(p.source.split()) for p in pairs)
    print(f"machine: {machine()}")
    print(f"{len(pairs)} {args.data} test sentences of {args.words} words (mean {mean_words:.1f})")
    rows = []
    for run in args.checkpoints:
        translator = Translator.from_checkpoint(run)
        translator.translate([pairs[0].source], beam=args.beam)  # warm-up
        seconds = {1: 0.0, args.beam: 0.0}
        words = {1: [], args.beam: []}
        for pair in pairs:
            for beam in seconds:
                started = time.perf_counter()
                (out,) = translator.translate([pair.source], beam=beam)
                seconds[beam] += time.perf_counter() - started
                words[beam].append(len(out.text.split()))
        greedy, beamed = seconds[1], seconds[args.beam]
        rows.append(
            [
                run,
                f"{1000 * greedy / len(pairs):.0f}",
                f"{1000 * beamed / len(pairs):.0f}",
                f"{beamed / greedy:.2f}x",
                f"{statistics.mean(words[1]):.1f} / {statistics.mean(words[args.beam]):.1f}",
            ]
        )
    headers = ["checkpoint", "greedy ms/sentence", f"beam {args.beam} ms/sentence", "ratio"]
    print(table([*headers, "output words, greedy / beam"], rows))


if __name__ == "__main__":
    main()
