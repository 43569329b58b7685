"""Ring attention: one sequence's attention over the P ranks of a process group, exact.

Each rank holds a slice of the queries, keys and values (:mod:`.layout`).  The key/value
slices travel around the ring, rank r sending to r+1 and receiving from r-1, so that at
step s rank r holds the keys of rank r-s; the next slice's transfer (``batch_isend_irecv``)
is under way while the current one is computed.  Each step's partial result (o_s, lse_s)
from the chunked kernel merges exactly into the running one:

    lse = log(exp lse_a + exp lse_b),   o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

The backward recomputes per slice from the final (o, lse), as the chunked kernel does per
tile: dQ stays home, the slice's dK, dV travel around the ring behind its keys and arrive
back at their owner after P steps.  No rank holds a (T, T) tensor or the whole K/V.

Work is cut into pieces of one kernel block (:mod:`.ring_schedule`): a (query piece, key
piece) pair is computed in full, on its causal diagonal, under the block mask's and the
score bias's tile, or skipped when nothing in it may attend.  A rank holds its slices,
their output and gradients, the slices in transit, and O(block) per call -- never a
chunk-sized copy, a (T, T) tensor or the whole K/V.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import once_differentiable

from qkv.errors import InputError, QkvError
from qkv.functional.backends.chunked import DEFAULT_BLOCK_SIZE
from qkv.functional.backends.chunked_kernel import (
    TileWorkspace,
    compute_dtype,
    tile_backward,
    tile_forward,
)
from qkv.functional.checks import check_tensors
from qkv.functional.heads import repeat_kv
from qkv.functional.mask_mods import ModEvaluator
from qkv.functional.scores import resolve_scale

from .layout import group_rank_and_size, local_layout
from .ring_schedule import _pairs, _Ring, check_score_bias

__all__ = ["ring_attention", "RingPeerError"]


class RingPeerError(QkvError):
    """A rank of the ring stopped answering (it died, or the process group timed out)."""


def ring_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    causal: bool = False,
    block_mask: Any = None,
    score_mod: Any = None,
    scale: float | None = None,
    group: dist.ProcessGroup | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> Tensor:
    """This rank's rows of softmax(scale q k^T + mask) v over the whole sequence, whose
    queries, keys and values lie in slices on the ranks of ``group`` (default: the world).

    Shapes:
        query (B, H, T/P, Dh); key (B, Hkv, T/P, Dh); value (B, Hkv, T/P, Dv), Hkv dividing H,
        each this rank's part as :func:`~qkv.distributed.shard_sequence` cuts it (with the
        same ``causal``) -> output (B, H, T/P, Dv), in the query's dtype.

    Args:
        causal: query i sees key j iff j <= i (global positions); the slices must be in the
            zigzag layout (``shard_sequence(..., causal=True)``).  Ring steps whose chunks
            are entirely in the future are skipped.
        block_mask: an object with ``mask_mod(batch, head, q_idx, kv_idx) -> bool`` (True =
            may attend), as FlexAttention's ``BlockMask`` has; it is called with broadcast
            index tensors of *global* positions, (B,1,1,1), (1,H,1,1), (1,1,Tq,1), (1,1,1,Tk),
            for each pair of chunks, and pairs it blocks entirely are skipped.
        score_mod: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)`` at *global*
            positions, restricted to one that adds a bias not depending on the score,
            ``score + bias(b, h, q_idx, kv_idx)`` (ALiBi, a fixed relative bias): it is
            evaluated at score 0 on each tile and added.  One that changes the score itself
            (softcap) or needs a gradient (a learned table) raises InputError.
        scale: the factor on q . k; default 1 / sqrt(Dh).
        block_size: the kernel's tile, and the pieces of queries and keys each call gets
            (what a call copies and a mask or bias tile holds is one block's size).

    A query that may attend no key gets output 0 and zero gradients.  Every rank of the
    group must call this with the same shapes and options.
    """
    try:
        _check_call(query, key, value, block_mask, score_mod, block_size)
        problem = None
    except (QkvError, TypeError) as error:
        problem = error
    # before the first exchange, every rank learns every rank's shapes and verdict, so a
    # mistake on one rank stops all of them, here, instead of one rank failing inside the
    # transport while another computes from mismatched buffers
    _agree(query, key, value, bool(causal), block_size, problem, group)
    if problem is not None:
        raise problem
    layout = local_layout(query.shape[2], causal=bool(causal), group=group)
    rank, world = layout.rank, layout.world_size
    peers = (0, 0)  # global ranks of the next and the previous rank in the ring
    if world > 1:
        ring_group = group or dist.group.WORLD
        peers = tuple(dist.get_global_rank(ring_group, (rank + d) % world) for d in (1, -1))
    ring = _Ring(
        layout,
        group,
        *peers,
        bool(causal),
        None if block_mask is None else ModEvaluator(block_mask.mask_mod, "mask_mod"),
        None if score_mod is None else check_score_bias(score_mod, query),
        resolve_scale("scaled_dot", scale, query.shape[-1]),
        block_size,
    )
    dtype = compute_dtype(query.dtype)
    # contiguous: the slices travel as they are (point-to-point ops send contiguous memory)
    key, value = (t.to(dtype).contiguous() for t in (key, value))
    output = _RingAttention.apply(query.to(dtype), key, value, ring)
    return output.to(query.dtype)


def _check_call(query, key, value, block_mask, score_mod, block_size) -> None:
    """This rank's own checks of a call (its tensors, mask, score_mod, block size)."""
    if block_mask is not None and not callable(getattr(block_mask, "mask_mod", None)):
        raise InputError(
            f"block_mask must have a mask_mod(batch, head, q_idx, kv_idx) method "
            f"(as FlexAttention's BlockMask), got {type(block_mask).__name__}"
        )
    check_tensors(query, key, value)
    if query.shape[2] != key.shape[2]:
        raise InputError(
            f"ring_attention is self-attention over one sequence: the query slice has "
            f"{query.shape[2]} positions, the key slice {key.shape[2]}; give both the same part"
        )
    if score_mod is not None and not callable(score_mod):
        raise InputError(f"score_mod must be a function, got {type(score_mod).__name__}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"block_size={block_size!r} must be a positive number of tokens")


#: Per rank, what :func:`_agree` compares: whether its own checks failed, then the shapes
#: (-1 where an argument is not a tensor of 4 dimensions) and the options.
_AGREED = ("failed", "query", "key", "value", "causal", "block_size")


def _shape(t: object) -> list[int]:
    return list(t.shape) if isinstance(t, Tensor) and t.dim() == 4 else [-1] * 4


def _agree(query, key, value, causal: bool, block_size, problem, group) -> None:
    """One all_gather of every rank's shapes, options and verdict (a few integers), then the
    same decision on every rank: if any rank's own checks failed, or the ranks hold parts of
    different lengths or shapes, or were called with different options, every rank raises
    (the failing rank its own error, the others an InputError naming the ranks)."""
    rank, world = group_rank_and_size(group)
    if world == 1:
        return
    size = block_size if isinstance(block_size, int) and not isinstance(block_size, bool) else -1
    mine = [int(problem is not None), *_shape(query), *_shape(key), *_shape(value)]
    mine += [int(causal), size]
    device = _collective_device(query, group)
    row = torch.tensor(mine, dtype=torch.long, device=device)
    rows = [torch.empty_like(row) for _ in range(world)]
    try:
        dist.all_gather(rows, row, group=group)
    except RuntimeError as error:  # a peer gone before the first exchange
        raise RingPeerError(
            f"ring_attention on rank {rank}: the ranks could not compare their shapes "
            f"({str(error).strip().splitlines()[0] if str(error).strip() else 'no reason'}); "
            "a rank died or hung, so this one stops"
        ) from None
    table = torch.stack(rows).tolist()  # (P, 15)
    failed = [r for r, entry in enumerate(table) if entry[0]]
    if failed:
        if problem is not None:
            return  # the caller raises this rank's own error
        raise InputError(
            f"ring_attention on rank {rank}: rank{'s' if len(failed) > 1 else ''} "
            f"{', '.join(map(str, failed))} refused {'their' if len(failed) > 1 else 'its'} "
            "inputs (its error says why), so every rank stops before any exchange"
        )
    lengths = [entry[3] for entry in table]  # the query parts' lengths
    if len(set(lengths)) > 1:
        each = ", ".join(f"rank {r}: {n}" for r, n in enumerate(lengths))
        raise InputError(
            f"ring_attention: the ranks hold parts of different lengths ({each} positions); "
            "every rank needs an equal part: cut the sequence with shard_sequence (same "
            "causal) from a length that is a multiple of P ranks (2P with causal), padding it"
        )
    if any(entry != table[0] for entry in table):
        each = "; ".join(f"rank {r}: {_described(entry)}" for r, entry in enumerate(table))
        raise InputError(
            f"ring_attention: the ranks were called with different shapes or options ({each}); "
            "every rank must pass its part of the same query, key and value, and the same "
            "causal and block_size"
        )


def _described(entry: list[int]) -> str:
    q, k, v = (tuple(entry[i : i + 4]) for i in (1, 5, 9))
    return f"query {q}, key {k}, value {v}, causal={bool(entry[13])}, block_size={entry[14]}"


def _collective_device(query: object, group) -> torch.device:
    """Where the group's collectives take their tensors: the GPU under nccl, else the CPU."""
    if dist.get_backend(group) != "nccl":
        return torch.device("cpu")
    if isinstance(query, Tensor) and query.device.type == "cuda":
        return query.device
    return torch.device("cuda", torch.cuda.current_device())


class _RingAttention(torch.autograd.Function):
    """(query, key, value, ring) -> output; the backward sends dK, dV around the ring."""

    @staticmethod
    def forward(ctx, query, key, value, ring):
        output, lse = _forward(query, key, value, ring)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.ring = ring
        return output

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        query, key, value, output, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = _backward(query, key, value, output, lse, grad_output, ctx.ring)
        return grad_q, grad_k, grad_v, None


# -- the two passes --------------------------------------------------------------------------


def _forward(q: Tensor, k: Tensor, v: Tensor, ring: _Ring) -> tuple[Tensor, Tensor]:
    """Shapes: q (B, H, t, Dh), k (B, Hkv, t, Dh), v (B, Hkv, t, Dv) -> output (B, H, t, Dv),
    lse (B, H, t), t = T / P.  Held besides the inputs: the output, and the key/value slices
    being received (and, from the second step on, the ones being computed and sent)."""
    world = ring.layout.world_size
    output = q.new_zeros(*q.shape[:3], v.shape[-1])
    lse = q.new_full(q.shape[:3], float("-inf"))
    workspace = TileWorkspace()  # one tile buffer for every piece
    for step in range(world):
        pending = _Transfer(ring, step, [k, v] if step < world - 1 else [])
        for rows, cols, mask, diagonal in _pairs(ring, step, q):
            part, part_lse = tile_forward(
                q[:, :, rows],
                _heads(k[:, :, cols], q),
                _heads(v[:, :, cols], q),
                mask,
                diagonal,
                ring.scale,
                ring.block_size,
                workspace,
            )
            _merge(output[:, :, rows], lse[:, :, rows], part, part_lse)
        received = pending.wait()
        if received:
            k, v = received
    return output, lse


def _backward(
    q: Tensor, k: Tensor, v: Tensor, output: Tensor, lse: Tensor, grad_output: Tensor, ring: _Ring
) -> tuple[Tensor, Tensor, Tensor]:
    """dQ accumulates at home; the gradient of the keys held at step s, summed by the ranks
    they visited so far, arrives from the previous rank while step s is computed, and leaves
    for the next one during step s+1; after the last step it reaches its owner."""
    world = ring.layout.world_size
    grad_q = torch.zeros_like(q)
    grads: list[Tensor] = []  # dK, dV of the previous step's keys, summed over their visits
    workspace = TileWorkspace()  # the two tile buffers, for every piece
    for step in range(world):
        outgoing = [k, v] if step < world - 1 else []
        pending = _Transfer(ring, step, outgoing + grads)
        local = [torch.zeros_like(k), torch.zeros_like(v)]
        for rows, cols, mask, diagonal in _pairs(ring, step, q):
            part_q, part_k, part_v = tile_backward(
                q[:, :, rows],
                _heads(k[:, :, cols], q),
                _heads(v[:, :, cols], q),
                output[:, :, rows],
                lse[:, :, rows],
                grad_output[:, :, rows],
                mask,
                diagonal,
                ring.scale,
                ring.block_size,
                workspace,
            )
            grad_q[:, :, rows] += part_q
            local[0][:, :, cols] += _sum_heads(part_k, k.shape[1])
            local[1][:, :, cols] += _sum_heads(part_v, v.shape[1])
        received = pending.wait()
        if outgoing:
            k, v, *received = received
        # in place into the received buffers: no third pair of buffers
        grads = [r.add_(m) for r, m in zip(received, local, strict=True)] if received else local
    del k, v, local  # the last keys held are no longer needed: free them before the trip home
    if world > 1:
        grads = _Transfer(ring, world, grads).wait()  # home: this rank's keys
    return grad_q, grads[0], grads[1]


def _merge(output: Tensor, lse: Tensor, part: Tensor, part_lse: Tensor) -> None:
    """Fold a partial (part, part_lse) into the running (output, lse) views, in place.
    Rows where both are -inf (no key yet) stay output 0, lse -inf."""
    total = torch.logaddexp(lse, part_lse)
    safe = total.masked_fill(total == float("-inf"), 0.0)
    output.mul_((lse - safe).exp().unsqueeze(-1)).add_(part * (part_lse - safe).exp()[..., None])
    lse.copy_(total)


def _heads(kv_part: Tensor, query: Tensor) -> Tensor:
    """Grouped-query attention: (B, Hkv, c, D) -> (B, H, c, D)."""
    return repeat_kv(kv_part, query.shape[1] // kv_part.shape[1])


def _sum_heads(grad: Tensor, kv_heads: int) -> Tensor:
    """The gradient of repeat_kv: (B, H, c, D) -> (B, Hkv, c, D), summing each group."""
    batch, heads, length, width = grad.shape
    if heads == kv_heads:
        return grad
    return grad.view(batch, kv_heads, heads // kv_heads, length, width).sum(2)


# -- the transport ---------------------------------------------------------------------------


class _Transfer:
    """Send ``tensors`` to the next rank and receive as many, shaped alike, from the
    previous one, started now (``batch_isend_irecv``) and awaited by :meth:`wait`.  Each
    tensor has its own tag (its place in the list), so keys, values and gradients never
    cross."""

    def __init__(self, ring: _Ring, step: int, tensors: list[Tensor]):
        self.ring, self.step = ring, step
        self.received = [
            torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors
        ]
        ops = []
        for tag, (tensor, buffer) in enumerate(zip(tensors, self.received, strict=True)):
            ops.append(dist.P2POp(dist.isend, tensor, ring.next_peer, ring.group, tag))
            ops.append(dist.P2POp(dist.irecv, buffer, ring.prev_peer, ring.group, tag))
        self.works = self._guard(lambda: dist.batch_isend_irecv(ops)) if ops else []

    def wait(self) -> list[Tensor]:
        for work in self.works:
            self._guard(work.wait)
        return self.received

    def _guard(self, call):
        try:
            return call()
        except RuntimeError as error:  # gloo/nccl: a closed connection or a timeout
            ring = self.ring
            lines = str(error).strip().splitlines() or ["no reason given"]
            # gloo's "[file.cc:553] Connection closed by peer [addr]:port. This is ..." -> the cause
            reason = re.sub(r"^\[[^\]]*\]\s*", "", lines[0]).split(". ")[0]
            raise RingPeerError(
                f"ring_attention on rank {ring.layout.rank}: ring step {self.step} got no "
                f"answer from rank {ring.prev_peer} or {ring.next_peer} ({reason}); a rank "
                "died or hung, so this one stops"
            ) from None
