"""Decoding speed of qkv's Transformer with its KV cache against recomputing the prefix.

    python -m benchmarks.decoding                 # 32 sentences x 100 tokens, greedy and beam 4
    python -m benchmarks.decoding --repeats 1 --length 30    # a quick look
    python -m benchmarks.decoding --model rnn --threads 1    # the RNN: beam 4 against greedy

With ``--model rnn``: see ``benchmarks.recurrent_decoding``; the rest of this text is about
the Transformer's cache.

The same ``greedy_search`` / ``beam_search`` drive two thin adapters around one model (the
small Transformer, random seeded weights: speed does not depend on training):

- ``CachedDecoder``: qkv's own ``start`` / ``step`` -- encoder once, cross-attention keys and
  values projected once, a KV cache per decoder block, one new position per step;
- ``NoCacheDecoder``: the state is the encoder memory, the source mask and the tokens so far;
  every step re-runs the decoder stack over the whole prefix and keeps the last position
  (only that position goes through the output projection, so the baseline wastes nothing
  but the recomputation the cache saves).

Both adapters set the EOS log-probability to -inf, so every hypothesis runs to ``--length``
tokens and both paths do exactly the same number of steps.  Cached and uncached greedy
search must produce identical tokens (checked).  Then per-step time for one sentence at
prefix 1 against prefix ``--length``, with and without the cache.

On a machine busy with other work, ``--threads 1`` gives steadier numbers: small decoding
ops slow down several-fold when torch's threads have to wait for a core.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from benchmarks.common import machine, table
from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, pad_sequences
from qkv.decoding import Hypotheses, beam_search, greedy_search
from qkv.models.base import StepOutput, select_state
from qkv.models.transformer import Transformer, TransformerConfig

SPECIAL_IDS = 4  # PAD, BOS, EOS, UNK: random tokens are drawn above them


def _bar_eos(log_probs: Tensor, eos_id: int) -> Tensor:
    """EOS can never win: every hypothesis runs to max_len.  Shapes: (B, V) -> (B, V)."""
    log_probs[:, eos_id] = float("-inf")
    return log_probs


class CachedDecoder:
    """qkv's incremental decoding (``start`` / ``step``; the Transformer's KV cache), EOS barred;
    drives any Decodable model."""

    def __init__(self, model: Transformer, *, eos_id: int = EOS_ID):
        self.model, self.eos_id = model, eos_id

    def start(self, source: Tensor) -> object:
        return self.model.start(source)

    def step(self, tokens: Tensor, state: object, *, need_attention: bool = True) -> StepOutput:
        out = self.model.step(tokens, state, need_attention=need_attention)
        return StepOutput(_bar_eos(out.log_probs, self.eos_id), out.state, out.attention)


@dataclass
class PrefixState:
    """memory (B, S, D), source_mask (B, 1, 1, S), prefix (B, t) the tokens consumed so far;
    batch-first, so ``select_state`` reorders it for beam search."""

    memory: Tensor
    source_mask: Tensor
    prefix: Tensor


class NoCacheDecoder:
    """Decoding without a cache: every step runs the decoder over the whole prefix.

    Shapes: start(source (B, S)) -> PrefixState; step(tokens (B,), state) -> log_probs (B, V).
    """

    def __init__(self, model: Transformer, *, eos_id: int = EOS_ID):
        self.model, self.eos_id = model, eos_id

    def start(self, source: Tensor) -> PrefixState:
        encoded = self.model.encode(source)
        empty = torch.empty(source.shape[0], 0, dtype=torch.long, device=source.device)
        return PrefixState(encoded.memory, encoded.source_mask, empty)

    def step(
        self, tokens: Tensor, state: PrefixState, *, need_attention: bool = True
    ) -> StepOutput:
        model = self.model
        prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (B, t)
        # Transformer.decode, but only the last position goes through the output projection.
        x = model.target_positions(model.target_embedding(prefix) * model.embedding_scale)
        hidden = model.decoder(x, state.memory, memory_mask=state.source_mask).hidden
        logits = model.output(hidden[:, -1])  # (B, V)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        next_state = PrefixState(state.memory, state.source_mask, prefix)
        return StepOutput(_bar_eos(log_probs, self.eos_id), next_state)


def make_sources(
    count: int, *, vocab_size: int, seed: int, lengths: tuple[int, int] = (10, 40)
) -> Tensor:
    """(count, S) random source sentences, lengths uniform in ``lengths``, right-padded."""
    gen = torch.Generator().manual_seed(seed)
    low, high = lengths
    sentences = [
        torch.randint(
            SPECIAL_IDS,
            vocab_size,
            (int(torch.randint(low, high + 1, (), generator=gen)),),
            generator=gen,
        ).tolist()
        for _ in range(count)
    ]
    return pad_sequences(sentences, PAD_ID)


def decode_table(
    decoders: dict[str, object], source: Tensor, *, length: int, repeats: int
) -> tuple[str, dict[str, Hypotheses]]:
    """Whole-batch decoding time, greedy and beam 4, cached and uncached alternating.
    Also returns each decoder's greedy result (for the equality check)."""
    searches: dict[str, Callable[[object, int], Hypotheses]] = {
        "greedy": lambda m, n: greedy_search(m, source, max_len=n),
        "beam 4": lambda m, n: beam_search(m, source, beam_size=4, max_len=n),
    }
    names = list(decoders)
    rows, greedy_results = [], {}
    for search_name, search in searches.items():
        for name in names:  # warm-up: a few tokens, untimed
            search(decoders[name], min(length, 5))
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for index in range(repeats):
            for name in names if index % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                result = search(decoders[name], length)
                seconds[name].append(time.perf_counter() - start)
                lengths = {len(tokens) for tokens in result.tokens}
                if lengths != {length}:
                    raise AssertionError(f"{name} {search_name}: hypothesis lengths {lengths}")
                if search_name == "greedy":
                    greedy_results[name] = result
        cached, uncached = (statistics.median(seconds[name]) for name in names)
        sentences = source.shape[0]
        rows.append(
            [
                search_name,
                cached,
                uncached,
                sentences / cached,
                sentences / uncached,
                uncached / cached,
            ]
        )
        print(f"  {search_name}: cached {cached:.2f} s, no cache {uncached:.2f} s", flush=True)
    headers = [
        "search",
        "cached s",
        "no cache s",
        "cached sentences/s",
        "no cache sentences/s",
        "speed-up",
    ]
    return table(headers, rows), greedy_results


@torch.no_grad()
def step_table(model: Transformer, source: Tensor, *, length: int, repeats: int) -> str:
    """Median time of one step for one sentence at prefix 1 and prefix ``length``, with and
    without the cache; the four settings take turns so drift hits them alike."""
    source = source[:1]
    token = torch.tensor([BOS_ID])
    history = torch.randint(SPECIAL_IDS, model.config.target_vocab_size, (1, length - 1))
    keep = torch.zeros(1, dtype=torch.long)
    cached, uncached = CachedDecoder(model), NoCacheDecoder(model)

    empty_cache = cached.start(source)
    full_cache = cached.start(source)
    for position in range(length - 1):
        cached.step(history[:, position], full_cache, need_attention=False)
    memory = uncached.start(source)
    # Each setting: the step to time and how to make its state (the cache grows in place,
    # so the cached settings get a fresh copy every time).
    settings: dict[tuple[str, int], tuple[Callable, Callable[[], object]]] = {
        ("cached", 1): (cached.step, lambda: select_state(empty_cache, keep)),
        ("cached", length): (cached.step, lambda: select_state(full_cache, keep)),
        ("no cache", 1): (uncached.step, lambda: memory),
        ("no cache", length): (
            uncached.step,
            lambda: PrefixState(memory.memory, memory.source_mask, history),
        ),
    }
    times: dict[tuple[str, int], list[float]] = {key: [] for key in settings}
    keys = list(settings)
    for index in range(repeats + 1):  # the first round warms up, untimed
        for key in keys if index % 2 == 0 else keys[::-1]:
            step, prepare = settings[key]
            state = prepare()
            start = time.perf_counter()
            step(token, state, need_attention=False)  # as the searches call it
            if index > 0:
                times[key].append(time.perf_counter() - start)
    rows = []
    for name in ("cached", "no cache"):
        short, long = (statistics.median(times[name, prefix]) for prefix in (1, length))
        rows.append([name, short * 1e3, long * 1e3, long / short])
    headers = ["decoder", "ms/step at prefix 1", f"ms/step at prefix {length}", "ratio"]
    return table(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=("transformer", "rnn"), default="transformer")
    parser.add_argument(
        "--source-length", type=int, default=70, help="rnn: source tokens (a 50-word verse)"
    )
    parser.add_argument("--batch", type=int, default=32, help="sentences decoded at a time")
    parser.add_argument("--length", type=int, default=100, help="target tokens per sentence")
    parser.add_argument("--repeats", type=int, default=3, help="timed decodes per setting")
    parser.add_argument("--vocab", type=int, default=8000, help="vocabulary size (both sides)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("batch", "length", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.vocab <= SPECIAL_IDS:
        parser.error(f"--vocab must exceed the {SPECIAL_IDS} special ids")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.model == "rnn":
        from benchmarks.recurrent_decoding import run

        run(args, CachedDecoder)
        return

    torch.manual_seed(args.seed)
    config = TransformerConfig.small(args.vocab)
    model = Transformer(config).eval()
    source = make_sources(args.batch, vocab_size=args.vocab, seed=args.seed)
    decoders = {"cached": CachedDecoder(model), "no cache": NoCacheDecoder(model)}

    print(f"machine: {machine()}")
    print(
        f"model: small (d_model {config.d_model}, {config.num_heads} heads, "
        f"{config.num_encoder_layers}+{config.num_decoder_layers} layers), vocab {args.vocab}, "
        f"random weights; {args.batch} sentences (source length 10..40) x {args.length} "
        f"target tokens (EOS barred); median of {args.repeats}, cached and uncached alternating\n",
        flush=True,
    )
    decoding, greedy = decode_table(decoders, source, length=args.length, repeats=args.repeats)
    if greedy["cached"].tokens != greedy["no cache"].tokens:
        raise AssertionError("cached and uncached greedy search produced different tokens")
    print(f"\n## {args.batch} sentences x {args.length} tokens\n")
    print(decoding)
    print("\ncached and uncached greedy search produce identical tokens: yes")
    print(f"\n## one step, batch 1\n\n{step_table(model, source, length=args.length, repeats=20)}")


if __name__ == "__main__":
    main()
