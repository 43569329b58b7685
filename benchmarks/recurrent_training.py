"""Training throughput of the recurrent translators at equal width, one run, on real batches.

    python -m benchmarks.training --family rnn --threads 1
    python -m benchmarks.training --family rnn --threads 2 --steps 10

``rnn`` (no attention), ``rnn-attention`` with Bahdanau's additive score and with Luong's
``general`` score, all at the ``medium`` translation size (embedding and hidden width 256,
dropout 0.3, shared embeddings), train on the same batches of ``ding-de-en`` (German ->
English, Debian ``trans-de-en``): the training split, a joint BPE vocabulary of ``--vocab``
(as ``qkv train translation`` builds it) and ``--tokens``-token batches from the trainer's
batch sampler.  One step = forward, label-smoothed cross-entropy, backward, AdamW step, as in
the Transformer comparison; the models take turns on every batch (A B C, C B A, ...) so drift
of a shared machine hits them alike.  Throughput counts real target tokens; "vs rnn" is each
model's tokens/s over the no-attention baseline's (targets: additive >= 0.75x, general >=
0.9x), by the wall clock and by the process's CPU time (``time.process_time``): on a machine
shared with other work the wall clock also counts the time a step waited for a core, while
CPU time counts only the work (all of torch's threads together).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.common import machine, table
from benchmarks.train_steps import make_step, measure
from qkv.data import TranslationDataset, ding_de_en, train_tokenizer, training_texts
from qkv.data.batch import Batch
from qkv.data.batching import TokenBatchSampler
from qkv.models import build_model
from qkv.models.rnn_config import RNNConfig
from qkv.training.config import TrainConfig
from qkv.training.optimizer import make_optimizer

#: benchmark name -> (model type, score)
MODELS = {
    "rnn": ("rnn", "none"),
    "rnn-attention additive": ("rnn-attention", "additive"),
    "rnn-attention general": ("rnn-attention", "general"),
}
BASELINE = "rnn"
MAX_LEN = 128  # qkv train translation's default --max-len


def ding_batches(count: int, *, tokens: int, vocab_size: int, seed: int) -> tuple[list[Batch], int]:
    """``count`` training batches of ding-de-en as the trainer would draw them, and the
    size of the joint vocabulary."""
    pairs = ding_de_en("train")
    tokenizer = train_tokenizer("bpe", training_texts(pairs), vocab_size=vocab_size)
    data = TranslationDataset(
        pairs, tokenizer, tokenizer, max_source_len=MAX_LEN, max_target_len=MAX_LEN + 2
    )
    sampler = TokenBatchSampler(data.lengths, max_tokens=tokens, seed=seed)
    return [data.collate(indices) for indices in sampler.batches(0)[:count]], tokenizer.vocab_size


def build_models(vocab_size: int, seed: int) -> dict[str, torch.nn.Module]:
    models = {}
    for name, (model_type, score) in MODELS.items():
        torch.manual_seed(seed)
        config = RNNConfig(
            vocab_size,
            embedding_dim=256,
            hidden_dim=256,
            dropout=0.3,
            attention=score,
            share_embeddings=True,
            max_len=MAX_LEN + 2,
        )
        models[name] = build_model(model_type, config)
    return models


def run(args: argparse.Namespace) -> None:

    batches, vocab_size = ding_batches(
        min(args.steps + args.warmup, 16), tokens=args.tokens, vocab_size=args.vocab, seed=args.seed
    )
    models = build_models(vocab_size, args.seed)
    options = TrainConfig()
    cpu: dict[str, list[float]] = {name: [] for name in models}
    steps = {
        name: _cpu_timed(
            make_step(
                model,
                lambda b, m=model: m(b.source, b.target_input).logits,
                make_optimizer(model, options),
            ),
            cpu[name],
        )
        for name, model in models.items()
    }
    print(f"machine: {machine()}; torch threads {torch.get_num_threads()}")
    print(
        f"models: width 256 (embedding and hidden), 1 layer, GRU, dropout 0.3, joint BPE "
        f"vocabulary {vocab_size}; ding-de-en train batches of <= {args.tokens} tokens"
    )
    real = [b.num_target_tokens for b in batches]
    print(
        f"batches: ~{statistics.mean(real):.0f} real target tokens, "
        f"~{statistics.mean(b.source.shape[0] for b in batches):.0f} sentences; "
        f"{args.steps} timed steps per model after {args.warmup} warm-up, interleaved\n",
        flush=True,
    )
    times = measure(steps, batches, rounds=args.steps, warmup=args.warmup)
    tokens = sum(real[(args.warmup + i) % len(batches)] for i in range(args.steps))
    rate = {name: tokens / sum(seconds) for name, seconds in times.items()}
    cpu_rate = {name: tokens / sum(seconds[args.warmup :]) for name, seconds in cpu.items()}
    rows = [
        [
            name,
            statistics.median(seconds) * 1e3,
            rate[name],
            rate[name] / rate[BASELINE],
            statistics.median(cpu[name][args.warmup :]) * 1e3,
            cpu_rate[name] / cpu_rate[BASELINE],
        ]
        for name, seconds in times.items()
    ]
    headers = [
        "model",
        "median ms/step",
        "target tokens/s",
        f"vs {BASELINE} (wall)",
        "median CPU ms/step",
        f"vs {BASELINE} (CPU)",
    ]
    print(table(headers, rows))


def _cpu_timed(step: Callable[[Batch], float], seconds: list[float]) -> Callable[[Batch], float]:
    """The step, appending the CPU time it took to ``seconds``."""

    def timed(batch: Batch) -> float:
        start = time.process_time()
        loss = step(batch)
        seconds.append(time.process_time() - start)
        return loss

    return timed
