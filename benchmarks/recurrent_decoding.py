"""Greedy against beam-4 decoding of the recurrent translator over one long sentence.

    python -m benchmarks.decoding --model rnn --threads 1

``rnn-attention`` (Bahdanau's additive decoder, width 256, vocabulary ``--vocab``, random
seeded weights) decodes one source of ``--source-length`` tokens (a 50-word verse is about
70 BPE tokens) for ``--length`` target tokens with EOS barred, so greedy and beam search
take exactly the same number of steps and the ratio is the cost of a beam-4 step against a
greedy one.  (How many steps a search takes depends on the model: beam search with a
length penalty may keep extending hypotheses after greedy search has ended; see
``qkv.decoding.beam``'s ``stop_early``.)  Greedy and beam take turns; wall-clock and CPU
time (``time.process_time``, robust on a shared machine) are both reported.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import machine, table
from qkv.decoding import beam_search, greedy_search
from qkv.models import build_model
from qkv.models.rnn_config import RNNConfig


def run(args: argparse.Namespace, bar_eos) -> None:
    torch.manual_seed(args.seed)
    config = RNNConfig(
        args.vocab, embedding_dim=256, hidden_dim=256, attention="additive", share_embeddings=True
    )
    model = build_model("rnn-attention", config).eval()
    source = torch.randint(4, args.vocab, (1, args.source_length))
    decoder = bar_eos(model)
    searches = {
        "greedy": lambda: greedy_search(decoder, source, max_len=args.length),
        "beam 4": lambda: beam_search(decoder, source, beam_size=4, max_len=args.length),
    }
    print(f"machine: {machine()}; torch threads {torch.get_num_threads()}")
    print(
        f"model: rnn-attention (additive), width 256, vocab {args.vocab}, random weights; one "
        f"source of {args.source_length} tokens x {args.length} target tokens (EOS barred); "
        f"median of {args.repeats}, alternating\n",
        flush=True,
    )
    for search in searches.values():  # warm-up
        search()
    wall: dict[str, list[float]] = {name: [] for name in searches}
    cpu: dict[str, list[float]] = {name: [] for name in searches}
    names = list(searches)
    for index in range(args.repeats):
        for name in names if index % 2 == 0 else names[::-1]:
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            found = searches[name]()
            wall[name].append(time.perf_counter() - start_wall)
            cpu[name].append(time.process_time() - start_cpu)
            if len(found.tokens[0]) != args.length:
                raise AssertionError(f"{name} stopped after {len(found.tokens[0])} tokens")
    rows = []
    for name in names:
        rows.append(
            [
                name,
                statistics.median(wall[name]),
                statistics.median(wall[name]) / statistics.median(wall["greedy"]),
                statistics.median(cpu[name]) * 1e3 / args.length,
                statistics.median(cpu[name]) / statistics.median(cpu["greedy"]),
            ]
        )
    headers = ["search", "wall s", "vs greedy (wall)", "CPU ms/step", "vs greedy (CPU)"]
    print(table(headers, rows))
