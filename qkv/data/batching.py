"""Token-budget batching with length bucketing, deterministic per epoch, DDP-ready."""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["TokenBatchSampler"]


class TokenBatchSampler:
    """Yield batches of example indices whose padded size stays within ``max_tokens``.

    A batch's padded size is ``len(batch) * longest example in it``; an example longer than
    ``max_tokens`` gets a batch of its own. Building an epoch's batches:

    1. shuffle all indices (with ``shuffle``), cut them into chunks of ``chunk_size``;
    2. sort each chunk by length, so a batch holds similar lengths (little padding) while
       the chunks keep the epoch random;
    3. fill batches greedily along each sorted chunk, then shuffle the batch order.

    ``batches(epoch)`` depends only on ``(seed, epoch)``.

    Distributed training: every rank builds the same batch list, then rank ``r`` takes
    batches ``r, r + world_size, ...``, dropping the last incomplete round, so all ranks
    yield the same number of batches and stay in lockstep. ``batches(epoch)`` returns this
    rank's full list, so a resumed run can skip the batches it already trained on.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        *,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        chunk_size: int = 8192,
    ):
        self.lengths = [int(length) for length in lengths]
        if not self.lengths:
            raise ValueError("lengths is empty: there is nothing to batch")
        too_short = [i for i, length in enumerate(self.lengths) if length < 1]
        if too_short:
            raise ValueError(f"examples {too_short[:5]} have length < 1; lengths must be positive")
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be at least 1")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must lie in 0..world_size-1 (world_size={world_size})")
        if chunk_size < 1:
            raise ValueError(f"chunk_size={chunk_size} must be at least 1")
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.chunk_size = chunk_size
        self._cache: tuple[int, list[list[int]]] | None = None

    def _all_batches(self, epoch: int) -> list[list[int]]:
        """Every rank's batches of ``epoch``, before they are dealt out."""
        # one generator per (seed, epoch); the same on every rank and in every run
        rng = random.Random(f"qkv-batches:{self.seed}:{epoch}")
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        batches: list[list[int]] = []
        for start in range(0, len(order), self.chunk_size):
            chunk = sorted(order[start : start + self.chunk_size], key=self.lengths.__getitem__)
            batch: list[int] = []
            longest = 0
            for index in chunk:
                new_longest = max(longest, self.lengths[index])
                if batch and (len(batch) + 1) * new_longest > self.max_tokens:
                    batches.append(batch)
                    batch, new_longest = [], self.lengths[index]
                batch.append(index)
                longest = new_longest
            if batch:
                batches.append(batch)
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches for ``epoch``, in training order."""
        if self._cache is not None and self._cache[0] == epoch:
            return [list(batch) for batch in self._cache[1]]
        every = self._all_batches(epoch)
        rounds = len(every) // self.world_size
        if rounds == 0:
            raise ValueError(
                f"{len(self.lengths)} examples make {len(every)} batches with max_tokens="
                f"{self.max_tokens}, fewer than world_size={self.world_size}: every rank needs "
                "one; lower max_tokens"
            )
        mine = every[self.rank : rounds * self.world_size : self.world_size]
        self._cache = (epoch, mine)
        return [list(batch) for batch in mine]
