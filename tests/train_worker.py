"""A tiny model, data and sampler for the training tests, and a script that trains them.

``python tests/train_worker.py OUT_DIR [--resume] [--max-steps N]`` trains the toy copy model
in a fresh process.  ``slow_copy_training`` and ``interruptible_copy_training`` are the bodies of
the processes that the kill -9, signal and lock tests kill, interrupt or race;
``distributed_worker`` is the body of each process in the DDP equivalence test.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qkv.data.batch import BOS_ID, EOS_ID, PAD_ID, Batch, collate  # noqa: E402
from qkv.models import Seq2SeqOutput, register_model  # noqa: E402
from qkv.training import TrainConfig, seed_everything, train  # noqa: E402
from qkv.training.signals import TrainingInterrupted  # noqa: E402

FIRST_WORD = 4  # ids 0..3 are PAD, BOS, EOS, UNK


@dataclass(frozen=True)
class ToyConfig:
    vocab_size: int = 10
    dim: int = 16
    dropout: float = 0.0
    tie_embeddings: bool = False


class ToySeq2Seq(nn.Module):
    """GRU encoder, GRU decoder started from the encoder's last real state, dot attention.

    Padding never changes the outputs at real positions (the encoder runs left to right and
    its state is read at each source's last token; attention masks padded keys), so a batch
    gives the same outputs whatever it is padded to.
    """

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.source_embedding = nn.Embedding(config.vocab_size, config.dim, padding_idx=PAD_ID)
        self.target_embedding = nn.Embedding(config.vocab_size, config.dim, padding_idx=PAD_ID)
        self.encoder = nn.GRU(config.dim, config.dim, batch_first=True)
        self.decoder = nn.GRU(config.dim, config.dim, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        self.combine = nn.Linear(2 * config.dim, config.dim)
        self.output = nn.Linear(config.dim, config.vocab_size)
        if config.tie_embeddings:
            self.output.weight = self.target_embedding.weight

    def forward(self, source: Tensor, target_input: Tensor) -> Seq2SeqOutput:
        keep = source != PAD_ID  # (B, S)
        encoded, _ = self.encoder(self.dropout(self.source_embedding(source)))  # (B, S, D)
        last = keep.sum(1).clamp(min=1) - 1  # (B,)
        start = encoded[torch.arange(source.shape[0]), last].unsqueeze(0)  # (1, B, D)
        decoded, _ = self.decoder(self.dropout(self.target_embedding(target_input)), start)
        scores = decoded @ encoded.transpose(1, 2)  # (B, T, S)
        weights = scores.masked_fill(~keep.unsqueeze(1), float("-inf")).softmax(-1)
        context = weights @ encoded  # (B, T, D)
        hidden = torch.tanh(self.combine(torch.cat([decoded, context], -1)))
        return Seq2SeqOutput(self.output(self.dropout(hidden)), {"cross": [weights]})


register_model("toy-seq2seq", ToyConfig, ToySeq2Seq)


class ToyData:
    """Copy task: the target is the source between <s> and </s>."""

    def __init__(self, sources: list[list[int]]):
        self.sources = sources
        self.targets = [[BOS_ID, *ids, EOS_ID] for ids in sources]
        self.source_lengths = [len(ids) for ids in self.sources]
        self.target_lengths = [len(ids) for ids in self.targets]

    def __len__(self) -> int:
        return len(self.sources)

    def collate(self, indices: list[int]) -> Batch:
        delay = float(os.environ.get("QKV_TEST_DELAY", "0"))
        if delay:
            time.sleep(delay)  # lets the kill -9 test catch the run in the middle
        return collate(
            [self.sources[i] for i in indices], [self.targets[i] for i in indices], indices
        )


def copy_data(count: int, *, seed: int, vocab_size: int = 10, lengths=(2, 5)) -> ToyData:
    generator = random.Random(seed)
    sources = [
        [generator.randrange(FIRST_WORD, vocab_size) for _ in range(generator.randint(*lengths))]
        for _ in range(count)
    ]
    return ToyData(sources)


class ToySampler:
    """Fixed-size batches, shuffled per epoch from (seed, epoch), dealt round-robin to ranks
    (the same number on each), like TokenBatchSampler's contract."""

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.rank, self.world_size = rank, world_size

    def batches(self, epoch: int) -> list[list[int]]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        every = [order[i : i + self.batch_size] for i in range(0, self.size, self.batch_size)]
        rounds = len(every) // self.world_size
        return every[self.rank : rounds * self.world_size : self.world_size]


class FixedBatches:
    """The same list of batches every epoch."""

    def __init__(self, batches: list[list[int]]):
        self._batches = batches

    def batches(self, epoch: int) -> list[list[int]]:
        return [list(batch) for batch in self._batches]


def parameters(model: nn.Module) -> dict[str, Tensor]:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}


def small_run(
    out_dir: Path, *, resume: bool = False, model_config=None, data=None, init_seed=1, **fields
):
    """The toy copy model with dropout: 24 examples in 6 batches of 4 per epoch."""
    seed_everything(init_seed)
    model = ToySeq2Seq(model_config or ToyConfig(dropout=0.2))
    data = data or copy_data(24, seed=5)
    options = dict(lr=1e-2, warmup_steps=2, epochs=None, validate_every=0, device="cpu")
    config = TrainConfig(**{**options, **fields})
    result = train(
        model,
        data,
        copy_data(8, seed=6),
        config,
        out_dir,
        resume=resume,
        train_batches=ToySampler(len(data), 4, seed=config.seed),
        valid_batches=FixedBatches([[0, 1, 2, 3], [4, 5, 6, 7]]),
    )
    return model, result


# -------------------------------------------------------------------- kill -9 / resume script

WORKER_CONFIG = dict(
    lr=1e-2,
    warmup_steps=2,
    epochs=None,
    validate_every=3,
    log_every=1,
    device="cpu",
    label_smoothing=0.1,
    seed=3,
)


def run_copy_training(out_dir: Path, *, max_steps: int, resume: bool = False) -> nn.Module:
    """The script's training: ``small_run`` validating every 3 steps, logging every step."""
    torch.set_num_threads(1)
    model, _ = small_run(out_dir, resume=resume, init_seed=11, max_steps=max_steps, **WORKER_CONFIG)
    return model


def slow_copy_training(out_dir: Path, max_steps: int) -> None:
    """``run_copy_training`` at 50 ms per batch, for a process that is killed mid-run."""
    os.environ["QKV_TEST_DELAY"] = "0.05"
    run_copy_training(out_dir, max_steps=max_steps)


def interruptible_copy_training(out_dir: Path, max_steps: int) -> None:
    """``slow_copy_training`` as a command would run it: on SIGINT/SIGTERM, write the
    message to ``out_dir/interrupted.txt`` and exit with the exception's exit code."""
    try:
        slow_copy_training(out_dir, max_steps)
    except TrainingInterrupted as interrupted:
        (Path(out_dir) / "interrupted.txt").write_text(str(interrupted))
        sys.stdout.flush()
        os._exit(interrupted.exit_code)


def distributed_worker(
    rank: int, world_size: int, port: int, out_dir: str, steps: int, device: str = "cpu"
) -> None:
    """One DDP process: trains on ``rank``'s half of fixed batches and saves its parameters."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    seed_everything(0)
    model = ToySeq2Seq(ToyConfig())
    data = distributed_data()
    halves = [half[rank] for half in distributed_batches()]
    config = distributed_config(steps, device)
    train(
        model,
        data,
        data,
        config,
        Path(out_dir) / "run",
        train_batches=FixedBatches(halves),
        valid_batches=FixedBatches([[0, 1, 2], [3, 4]]),
    )
    torch.save(parameters(model), Path(out_dir) / f"params-{rank}.pt")


def single_process_reference(out_dir: Path, steps: int, device: str = "cpu"):
    """What the DDP workers must equal: one process training on both ranks' batches.
    Returns the model, its initial parameters and the TrainResult."""
    torch.set_num_threads(1)
    seed_everything(0)
    model = ToySeq2Seq(ToyConfig())
    initial = parameters(model)
    data = distributed_data()
    result = train(
        model,
        data,
        data,
        distributed_config(steps, device),
        out_dir,
        train_batches=FixedBatches([first + second for first, second in distributed_batches()]),
        valid_batches=FixedBatches([[0, 1, 2], [3, 4]]),
    )
    return model, initial, result


def distributed_config(steps: int, device: str) -> TrainConfig:
    return TrainConfig(
        lr=1e-2,
        warmup_steps=1,
        epochs=None,
        max_steps=steps,
        device=device,
        validate_every=0,
        label_smoothing=0.1,
        clip_norm=0.5,
        log_every=1,
    )


def distributed_data() -> ToyData:
    return copy_data(12, seed=9, lengths=(1, 6))


def distributed_batches() -> list[tuple[list[int], list[int]]]:
    """Per step, rank 0's and rank 1's batch: different sizes, so different token counts."""
    return [([0, 1, 2], [3, 4]), ([5, 6], [7, 8, 9, 10]), ([11, 0, 3], [6, 8])]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--resume", action="store_true")
    arguments = parser.parse_args()
    run_copy_training(arguments.out_dir, max_steps=arguments.max_steps, resume=arguments.resume)


if __name__ == "__main__":
    main()
