"""BLEU against source-sentence length, several trained translators side by side.

    python -m benchmarks.bleu_by_length --data bible-en-es --beam 4 \\
        --plot docs/bible-bleu-by-length.png rnn=runs/bible-rnn rnn-attention=runs/bible-rnn-additive

The shape of Bahdanau et al. (2015), Figure 2: every checkpoint translates the same split
(sacreBLEU, beam search), the sentences are grouped by source length in words (0-10,
11-20, 21-30, 31-40, 41+), and corpus BLEU is computed per group.  Prints one table
(rows: length buckets, columns: models), writes the curves to one PNG, and with
``--json`` the numbers to a file.  Decoding is the slow part: about a minute per 1,000
sentences per model at beam 4 on one core of this project's CPU machine, more for long
sentences.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from benchmarks.common import machine, table
from qkv.data import load_corpus
from qkv.evaluation import bleu_by_length, corpus_scores
from qkv.plotting import plot_bleu_by_length
from qkv.tasks import Translator


def _named_checkpoints(items: list[str]) -> dict[str, str]:
    named = {}
    for item in items:
        name, separator, path = item.partition("=")
        if not separator or not name or not path:
            raise SystemExit(f"give checkpoints as NAME=DIR, got {item!r}")
        if name in named:
            raise SystemExit(f"model name {name!r} given twice")
        named[name] = path
    return named


def _bleu(bucket: dict) -> float:
    return math.nan if bucket["bleu"] is None else bucket["bleu"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoints", nargs="+", help="NAME=RUN_DIR, one per model")
    parser.add_argument("--data", default="bible-en-es", help="corpus name or file(s)")
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"])
    parser.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--plot", help="PNG file for the BLEU-by-length curves")
    parser.add_argument("--json", help="write the numbers (and signatures) to this file")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    checkpoints = _named_checkpoints(args.checkpoints)
    pairs = load_corpus(args.data, args.split)[: args.limit]
    sources = [pair.source for pair in pairs]
    references = [pair.target for pair in pairs]
    lengths = [len(source.split()) for source in sources]
    print(f"machine: {machine()}, {torch.get_num_threads()} thread(s)")
    print(f"{args.data} {args.split}: {len(pairs)} sentences, beam {args.beam}\n", flush=True)

    results: dict[str, dict] = {}
    for name, path in checkpoints.items():
        translator = Translator.from_checkpoint(path)
        start = time.perf_counter()
        hypotheses = [t.text for t in translator.translate(sources, beam=args.beam)]
        seconds = time.perf_counter() - start
        overall = corpus_scores(hypotheses, references)
        buckets = bleu_by_length(hypotheses, references, lengths)
        results[name] = {
            "checkpoint": path,
            "bleu": overall.bleu,
            "chrf": overall.chrf,
            "signature": overall.signature,
            "decode_seconds": seconds,
            "buckets": [  # an empty bucket's NaN becomes null: standard JSON
                {**vars(b), "bleu": None if math.isnan(b.bleu) else b.bleu} for b in buckets
            ],
        }
        print(f"{name}: BLEU {overall.bleu:.2f}, decoded in {seconds:.0f} s", flush=True)

    labels = [bucket["label"] for bucket in next(iter(results.values()))["buckets"]]
    counts = [bucket["count"] for bucket in next(iter(results.values()))["buckets"]]
    rows = [
        [f"{label} words", count, *(_bleu(r["buckets"][i]) for r in results.values())]
        for i, (label, count) in enumerate(zip(labels, counts))
    ]
    rows.append(["all", len(pairs), *(r["bleu"] for r in results.values())])
    print()
    print(table(["source length", "sentences", *(f"BLEU {n}" for n in results)], rows))
    print(f"\nBLEU signature: {next(iter(results.values()))['signature']['bleu']}")
    if args.plot:
        curves = {
            name: [math.nan if b["bleu"] is None else b["bleu"] for b in r["buckets"]]
            for name, r in results.items()
        }
        title = f"{args.data} {args.split}, beam {args.beam}"
        path = plot_bleu_by_length(labels, curves, args.plot, counts=counts, title=title)
        print(f"plot: {path}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        print(f"numbers: {args.json}")


if __name__ == "__main__":
    main()
