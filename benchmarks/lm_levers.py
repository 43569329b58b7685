"""Which parts of a modern small LM pay off on a CPU at a fixed wall clock: `qkv train lm`'s
architectures and options against nanoGPT's CPU recipe stretched to the same minutes.

    python -m benchmarks.lm_levers                       # speeds, then every candidate x 3 seeds
    python -m benchmarks.lm_levers --speed               # step-time ratios only (one process)
    python -m benchmarks.lm_levers --speed --only "llama + Muon"   # those, the base and the peer
    python -m benchmarks.lm_levers --only llama --seeds 0 --steps 6774   # one run

How a 6-minute race is run without needing 6 quiet minutes per run: a run's score depends on
its number of updates, not on how long the machine took to make them.  So the race has two
parts, each measured where it is exact:

1. **Speed.**  Each candidate's training step (``qkv train lm``'s model and AdamW on batches
   of kjv windows) and nanoGPT's plain loop step are timed taking turns in one process
   (``benchmarks.common.interleaved``), one thread: a load that comes and goes hits all of
   them alike.  A candidate's updates in M minutes = M x 60 / its step time x the share of a
   run its steps take (``--step-share``, 0.97 for `qkv train lm`, measured by
   ``benchmarks.lm_end_to_end``; 1.0 for the plain loop, which does nothing else).
2. **Learning.**  Each candidate trains for exactly that many updates (``--max-steps``: its
   cosine schedule spans them, as ``--max-minutes`` would fit it) with each seed, and the
   plain loop runs nanoGPT's recipe with ``max_iters`` set to its own count (the recipe
   "stretched to fill the minutes").  Every final model is scored by
   ``benchmarks.plain_lm_loop.score`` on all of kjv's validation text (nats per character).

Prints the speed table and the score table (mean and spread over seeds); ``--json`` writes
the numbers.  The candidates differ from `qkv train lm --size small` by the flags (and the
model's components) in ``CANDIDATES``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import interleaved, machine, table
from benchmarks.plain_lm_loop import NanoRecipe, score, train_plain
from qkv.cli.main import build_parser
from qkv.cli.options import given_train_values, setup_from
from qkv.data.text import load_text
from qkv.data.text_tokenizers import train_text_tokenizer
from qkv.models import DecoderLM, LMConfig
from qkv.tasks.lm import LM, LMSetup, encode_text, lm_config, load_lm
from qkv.tasks.presets import LM_SIZES
from qkv.tasks.task import train_with_options
from qkv.training import TrainConfig
from qkv.training.config import OPTIMIZERS
from qkv.training.optimizer import make_optimizer


@dataclass(frozen=True)
class Candidate:
    """One entry of the race: ``qkv train lm --data kjv --size small`` with ``flags``, its
    model then given the LMConfig fields in ``model`` (a component that no flag sets on its
    own: the levers are measured one at a time over the default)."""

    flags: tuple[str, ...] = ()
    model: dict = field(default_factory=dict)

    @property
    def setup(self) -> LMSetup:
        fields = {}
        flags = [flag for flag in self.flags if flag != "--optimizer" and flag not in OPTIMIZERS]
        for name, value in zip(flags[::2], flags[1::2], strict=True):
            fields[name.removeprefix("--").replace("-", "_")] = value
        for name in ("window", "num_kv_heads"):
            if name in fields:
                fields[name] = int(fields[name])
        return LMSetup(data="kjv", size="small", **fields)

    @property
    def optimizer(self) -> str:
        if "--optimizer" in self.flags:
            return self.flags[self.flags.index("--optimizer") + 1]
        return LM_SIZES["small"].train["optimizer"]  # the command's default

    def config(self, vocab_size: int) -> LMConfig:
        return replace(lm_config(self.setup, vocab_size), **self.model)


#: GPT-2's layout with AdamW, the optimizer of nanoGPT's recipe and qkv's default before Muon.
GPT_ADAMW = ("--arch", "gpt", "--optimizer", "adamw")
ADAMW = ("--optimizer", "adamw")
#: The race's entries: gpt with AdamW (the first: the base of the ratios), each lever alone
#: over it, then the architectures that combine them; `qkv train lm`'s default is llama + Muon.
CANDIDATES: dict[str, Candidate] = {
    "gpt, AdamW": Candidate(GPT_ADAMW),
    "+ RoPE": Candidate((*GPT_ADAMW, "--positions", "rope")),
    "+ QK-norm": Candidate(GPT_ADAMW, model={"qk_norm": True}),
    "+ ReLU²": Candidate(GPT_ADAMW, model={"activation": "relu2"}),
    "+ untied output": Candidate(GPT_ADAMW, model={"tie_embeddings": False}),
    "+ windows (16, SSSL)": Candidate((*GPT_ADAMW, "--window", "16", "--window-pattern", "SSSL")),
    "+ Muon (gpt's default)": Candidate(("--arch", "gpt")),
    "+ Muon + RoPE": Candidate(("--arch", "gpt", "--positions", "rope")),
    "llama (RMSNorm, SwiGLU, RoPE, untied)": Candidate((*ADAMW, "--arch", "llama")),
    "nanochat (RoPE, QK-norm, ReLU², untied, soft-cap)": Candidate((*ADAMW, "--arch", "nanochat")),
    "nanochat + Muon": Candidate(("--arch", "nanochat")),
    # the llama presets: llama's layout with Muon (the command's default), and what else was tried
    "llama + Muon (the default)": Candidate(),
    "llama + Muon, 2 KV heads": Candidate(("--arch", "llama", "--num-kv-heads", "2")),
    "llama + Muon, tied output": Candidate(("--arch", "llama"), model={"tie_embeddings": True}),
    "llama + Muon, 6 layers": Candidate(("--arch", "llama"), model={"num_layers": 6}),
}
PEER = "nanoGPT's CPU recipe, stretched"


def step_times(
    train_ids: torch.Tensor, vocab_size: int, rounds: int, names: list[str] | None = None
) -> dict[str, float]:
    """Seconds per training step of the candidates ``names`` (default: all), the first
    candidate (the base of the ratios) and the plain loop, interleaved."""
    from benchmarks.lm import PlainGPT

    recipe = NanoRecipe()
    generator = torch.Generator().manual_seed(0)
    offsets = torch.arange(recipe.context + 1)

    def batch() -> torch.Tensor:
        starts = torch.randint(len(train_ids) - recipe.context, (12,), generator=generator)
        return train_ids[starts[:, None] + offsets]

    def stepper(model: torch.nn.Module, logits_of, optimizer: torch.optim.Optimizer) -> callable:
        model.train()

        def run() -> None:
            for _ in range(20):  # a turn: 20 steps
                windows = batch()
                logits = logits_of(windows[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()

        return run

    runs = {}
    base = next(iter(CANDIDATES))
    chosen = [base, *(name for name in names or CANDIDATES if name not in (base, PEER))]
    for name in chosen:
        candidate = CANDIDATES[name]
        model = DecoderLM(candidate.config(vocab_size))
        config = TrainConfig(lr=1e-4, betas=(0.9, 0.99), optimizer=candidate.optimizer)
        optimizer = make_optimizer(model, config)
        runs[name] = stepper(model, lambda ids, model=model: model(ids).logits, optimizer)
    plain = PlainGPT(vocab_size, recipe.d_model, recipe.num_heads, recipe.num_layers, 64)
    plain_optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-4, betas=(0.9, 0.99))
    runs[PEER] = stepper(plain, plain, plain_optimizer)
    return {name: seconds / 20 for name, seconds in interleaved(runs, rounds=rounds).items()}


def train_candidate(candidate: Candidate, steps: int, seed: int, out: Path) -> float:
    """`qkv train lm` (the command's own options and trainer, in this process) for exactly
    ``steps`` updates; the final model's score on kjv's validation text."""
    argv = ["train", "lm", "--data", "kjv", "--size", "small", "--out", str(out)]
    argv += ["--max-steps", str(steps), "--seed", str(seed), *candidate.flags]
    args = build_parser().parse_args(argv)

    def build(setup, corpus, start):  # the flags' model with the candidate's components
        return DecoderLM(candidate.config(start.tokenizer.vocab_size))

    with contextlib.redirect_stdout(io.StringIO()):
        train_with_options(
            replace(LM, build=build), setup_from(args, LMSetup), out, given=given_train_values(args)
        )
    lm = load_lm(out)
    ids = encode_text(lm.tokenizer, load_text("kjv").valid)
    model = lm.model.eval()
    return score(lambda batch: model(batch).logits, ids)


def train_peer(
    train_ids: torch.Tensor, valid_ids: torch.Tensor, vocab: int, iterations: int, seed: int
) -> float:
    recipe = replace(NanoRecipe(), iterations=iterations)
    model, _ = train_plain(train_ids, vocab, minutes=10**6, marks=[], recipe=recipe, seed=seed)
    model.eval()
    return score(model, valid_ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="the race's wall clock")
    parser.add_argument("--speed", action="store_true", help="the step-time table only")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    parser.add_argument("--step-share", type=float, default=0.97)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", action="append", choices=[*CANDIDATES, PEER])
    parser.add_argument("--steps", type=int, help="updates for --only (default: from speeds)")
    parser.add_argument("--speeds", type=Path, help="a --json of an earlier --speed run")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus = load_text("kjv")
    tokenizer = train_text_tokenizer("char", corpus.train)
    train_ids = encode_text(tokenizer, corpus.train)
    valid_ids = encode_text(tokenizer, corpus.valid)
    print(machine())
    results: dict = {"machine": machine(), "minutes": args.minutes}
    if args.speeds is not None:
        seconds = json.loads(args.speeds.read_text())["step_seconds"]
    elif args.steps is None:
        names = args.only if args.speed else None
        seconds = step_times(train_ids, tokenizer.vocab_size, args.rounds, names)
    else:
        seconds = {}
    if seconds:
        base = seconds[next(iter(CANDIDATES))]
        rows = []
        for name, value in seconds.items():
            share = 1.0 if name == PEER else args.step_share
            updates = int(args.minutes * 60 / value * share)
            rows.append([name, value * 1e3, base / value, updates])
        print(
            table(
                [
                    "candidate",
                    "ms / step",
                    "speed vs gpt, AdamW",
                    f"updates in {args.minutes:g} min",
                ],
                rows,
            )
        )
        results["step_seconds"] = seconds
        results["updates"] = {row[0]: row[3] for row in rows}
    if args.speed:
        _write(args.json, results)
        return
    scores: dict[str, list[float]] = {}
    for name in args.only or [*CANDIDATES, PEER]:
        updates = args.steps or results["updates"][name]
        for seed in args.seeds:
            started = time.perf_counter()
            if name == PEER:
                value = train_peer(train_ids, valid_ids, tokenizer.vocab_size, updates, seed)
            else:
                with tempfile.TemporaryDirectory() as folder:
                    run = Path(folder) / "run"
                    value = train_candidate(CANDIDATES[name], updates, seed, run)
            scores.setdefault(name, []).append(value)
            print(
                f"{name}, seed {seed}, {updates} updates: {value:.4f} ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    rows = []
    peer = statistics.mean(scores[PEER]) if PEER in scores else None
    for name, values in scores.items():
        mean = statistics.mean(values)
        lead = "" if peer is None or name == PEER else f"{100 * (peer - mean) / peer:+.1f} %"
        rows.append([name, mean, min(values), max(values), lead])
    print(table(["candidate", "valid nats/char (mean)", "min", "max", "lead over the peer"], rows))
    results["scores"] = scores
    _write(args.json, results)


def _write(path: Path | None, results: dict) -> None:
    if path is not None:
        path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
