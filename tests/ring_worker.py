"""Bodies of the spawned processes of the ring attention tests (spawn needs importable functions).

``compare_worker`` runs every case of ``CASES`` through ``ring_attention`` on its slices and
writes, from rank 0, the largest differences of the gathered outputs and gradients from
attention over the whole sequence in one process.  ``dying_worker`` has one rank die
mid-step and records what the others raised.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from qkv.distributed import ring_attention, shard_sequence, unshard_sequence

#: name -> (batch, heads, kv heads, length, head width, causal, block mask or None,
#: score_mod or None, block size: the pieces of queries and keys each kernel call gets)
CASES = {
    "plain": (2, 4, 4, 16, 8, False, None, None, 1024),
    "causal": (2, 4, 4, 16, 8, True, None, None, 1024),
    "gqa": (1, 4, 2, 16, 8, False, None, None, 1024),
    "gqa_causal": (1, 6, 2, 16, 8, True, None, None, 1024),
    "masked_rows": (2, 2, 2, 16, 8, False, "masked_rows", None, 1024),
    "masked_rows_causal": (1, 2, 1, 16, 8, True, "masked_rows", None, 1024),
    "document": (1, 2, 2, 16, 8, True, "document", None, 1024),
    "pieces_causal": (2, 4, 2, 20, 8, True, None, None, 3),
    "alibi_causal": (1, 4, 2, 16, 8, True, None, "alibi", 3),
    "alibi_document": (2, 2, 2, 16, 8, False, "document", "alibi", 4),
}


def score_mod(name: str | None, heads: int):
    """ALiBi at global positions (its slopes for ``heads`` heads), or None."""
    if name is None:
        return None
    from qkv.functional.patterns import alibi
    from qkv.functional.positions import alibi_slopes

    return alibi(alibi_slopes(heads))


class FunctionMask:
    """The smallest block_mask: a mask_mod over global positions."""

    def __init__(self, mask_mod):
        self.mask_mod = mask_mod


def block_mask(name: str | None):
    if name == "masked_rows":  # queries 3 and 10 may attend nothing; the rest skip key 5
        return FunctionMask(lambda b, h, q, k: (q != 3) & (q != 10) & (k != 5))
    if name == "document":  # documents of 6 tokens: no attention across their borders
        return FunctionMask(lambda b, h, q, k: (q // 6) == (k // 6))
    return None


def reference(q, k, v, causal, mask, score=None):
    """softmax(score_mod(q k^T / sqrt(Dh)) + mask) v over the whole sequence, rows with no
    key -> 0."""
    repeats = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(repeats, 1), v.repeat_interleave(repeats, 1)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    length = q.shape[2]
    if score is not None:
        idx = torch.arange(length)
        b, h = torch.arange(q.shape[0]), torch.arange(q.shape[1])
        scores = score(scores, b[:, None, None, None], h[:, None, None], idx[:, None], idx)
    keep = torch.ones(length, length, dtype=torch.bool)
    if causal:
        keep = keep.tril()
    if mask is not None:
        idx = torch.arange(length)
        keep = keep & mask.mask_mod(None, None, idx[:, None], idx[None, :])
    scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v


def _join(rank: int, world: int, port: int, timeout_s: float = 60, backend: str = "gloo") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s)
    )


def compare_worker(
    rank: int, world: int, port: int, out: str, cases: list[str], backend: str = "gloo"
) -> None:
    _join(rank, world, port, backend=backend)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    errors = {}
    for dtype in (torch.float32, torch.float64):
        for name in cases:
            batch, heads, kv_heads, length, width, causal, mask_name, score_name, block = CASES[
                name
            ]
            mask, score = block_mask(mask_name), score_mod(score_name, heads)
            generator = torch.Generator().manual_seed(list(CASES).index(name))
            q, k, v, grad = (
                torch.randn(batch, h, length * world // 2, width, generator=generator, dtype=dtype)
                for h in (heads, kv_heads, kv_heads, heads)
            )
            parts = [
                shard_sequence(t.to(device), 2, causal=causal).requires_grad_() for t in (q, k, v)
            ]
            output = ring_attention(
                *parts, causal=causal, block_mask=mask, score_mod=score, block_size=block
            )
            output.backward(shard_sequence(grad.to(device), 2, causal=causal))
            gathered = [output.detach(), *(p.grad for p in parts)]
            gathered = [unshard_sequence(t, 2, causal=causal).cpu() for t in gathered]
            full = [t.clone().requires_grad_() for t in (q, k, v)]
            expected = reference(*full, causal, mask, score)
            expected.backward(grad)
            wanted = [expected.detach(), *(t.grad for t in full)]
            errors[f"{name}/{dtype}"] = [
                float((got - want).abs().max()) for got, want in zip(gathered, wanted, strict=True)
            ]
            errors[f"{name}/{dtype}/zero_rows"] = float(wanted[0].abs().amax(-1).eq(0).sum())
    if rank == 0:
        Path(out).write_text(json.dumps(errors))
    dist.destroy_process_group()


def dying_worker(rank: int, world: int, port: int, out: str) -> None:
    """Rank 1 dies before its second ring call; the others must raise, not hang."""
    _join(rank, world, port, timeout_s=5)
    q = torch.randn(1, 2, 64, 8)
    ring_attention(q, q, q, causal=True)  # a first call that works
    if rank == 1:
        os._exit(1)
    start = time.monotonic()
    try:
        ring_attention(q, q, q, causal=True).sum()
        message = "no error"
    except Exception as error:  # what the user would see
        message = f"{type(error).__name__}: {error}"
    Path(out, f"rank{rank}.txt").write_text(f"{time.monotonic() - start:.1f}\n{message}")
    sys.stdout.flush()
    os._exit(0)  # the group is broken: leave without the teardown barrier


#: name -> per rank (length of its part, heads, causal, block_size, dimensions): what each
#: rank passes to ring_attention in a call that must be refused on every rank.
MISTAKES = {
    "unequal lengths": [(6, 2, False, 1024, 4), (5, 2, False, 1024, 4)],
    "unequal causal lengths": [(6, 2, True, 1024, 4), (4, 2, True, 1024, 4)],
    "heads differ": [(4, 2, False, 1024, 4), (4, 4, False, 1024, 4)],
    "causal on one rank": [(4, 2, True, 1024, 4), (4, 2, False, 1024, 4)],
    "block sizes differ": [(4, 2, False, 2, 4), (4, 2, False, 4, 4)],
    "a 3-D tensor on one rank": [(4, 2, False, 1024, 4), (4, 2, False, 1024, 3)],
}


def mistake_worker(rank: int, world: int, port: int, out: str) -> None:
    """Every case of ``MISTAKES``, then a correct call (the group must still work); writes
    per rank {case: "ErrorType: message"} and the correct call's largest output."""
    _join(rank, world, port, timeout_s=20)
    seen = {}
    for name, per_rank in MISTAKES.items():
        length, heads, causal, block, dims = per_rank[rank]
        q = torch.ones(1, heads, length, 8)
        q = q[0] if dims == 3 else q
        try:
            ring_attention(q, q, q, causal=causal, block_size=block)
            seen[name] = "no error"
        except Exception as error:  # what the user would see, on each rank
            seen[name] = f"{type(error).__name__}: {error}"
    q = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(rank))
    seen["after"] = float(ring_attention(q, q, q, causal=True).abs().max())
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


# -- training under context parallelism -------------------------------------------------------

TEXT = "".join(
    f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13}\n" for i in range(60)
)


def lm_training(
    out_dir: str, text_path: str, context_parallel: int, steps: int, accumulate: int = 1, **setup
):
    """One small LM trained ``steps`` steps with windows of 24 tokens (padded to a multiple of
    2P where they are shorter), no dropout, every step checkpointed; ``accumulate`` batches
    per step."""
    from qkv.tasks.lm import LMSetup, train_lm
    from qkv.training import TrainConfig

    config = TrainConfig(
        lr=1e-3,
        warmup_steps=0,
        max_steps=steps,
        max_tokens=400,
        validate_every=1,
        log_every=1,
        device="cpu",
        label_smoothing=0.0,
        context_parallel=context_parallel,
        accumulate=accumulate,
    )
    lm_setup = LMSetup(data=text_path, context=24, dropout=0.0, **setup)
    return train_lm(lm_setup, config, out_dir, resume=(Path(out_dir) / "last.json").exists())


def training_worker(
    rank: int, world: int, port: int, out_dir: str, text_path: str, context_parallel: int,
    steps: int, positions: str, die_after: int | None = None,
) -> None:  # fmt: skip
    """A torchrun-like process; with ``die_after`` rank 1 dies in its step after that many."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )  # fmt: skip
    torch.set_num_threads(1)
    if die_after is not None:
        import qkv.training.distributed as distributed
        from qkv.training.step import TrainStep

        distributed.PROCESS_GROUP_TIMEOUT = datetime.timedelta(seconds=10)
        original, calls = TrainStep.__call__, []

        def dying_step(self, *args, **kwargs):
            calls.append(1)
            if rank == 1 and len(calls) > die_after:
                os._exit(1)
            return original(self, *args, **kwargs)

        TrainStep.__call__ = dying_step
    try:
        lm_training(out_dir, text_path, context_parallel, steps, positions=positions)
    except Exception as error:
        Path(out_dir, f"error-{rank}.txt").write_text(f"{type(error).__name__}: {error}")
        os._exit(3)


def lm_gradient_worker(
    rank: int, world: int, port: int, out: str, positions: str, window: int | None = None
) -> None:
    """Summed token loss of a float64 LM over one window of 30 tokens (padded to a multiple
    of 2P): its gradients summed over the ranks, against one process; rank 0 writes the
    largest difference per parameter (and the loss's, which sequence_loss sums in float32).
    ``window``: the LM's sliding window."""
    from qkv.models import DecoderLM, LMConfig
    from qkv.training.loss import sequence_loss

    _join(rank, world, port)
    config = LMConfig(
        40, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, d_ff=64, max_len=32,
        dropout=0.0, positions=positions, window=window,
    )  # fmt: skip
    torch.manual_seed(0)
    lm = DecoderLM(config).double()
    ids = torch.randint(1, 40, (2, 31), generator=torch.Generator().manual_seed(1))
    parallel = lm.context_parallel()
    logits = parallel(ids[:, :0], ids[:, :-1]).logits
    loss, _ = sequence_loss(logits, parallel.shard(ids[:, 1:]), pad_id=0)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in lm.named_parameters()}
    for grad in grads.values():
        dist.all_reduce(grad)
    total = loss.detach().clone()
    dist.all_reduce(total)
    lm.zero_grad()
    expected, _ = sequence_loss(lm(ids[:, :-1]).logits, ids[:, 1:], pad_id=0)
    expected.backward()
    errors = {name: float((grads[name] - p.grad).abs().max()) for name, p in lm.named_parameters()}
    errors["loss (relative; float32)"] = float(
        (total - expected.detach()).abs() / expected.detach()
    )
    if rank == 0:
        Path(out).write_text(json.dumps(errors))
    dist.destroy_process_group()
