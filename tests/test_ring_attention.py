"""Ring attention over gloo processes on the CPU equals attention over the whole sequence in
one process: outputs and gradients, causal or not, grouped KV heads, rows with no key."""

from __future__ import annotations

import json
import multiprocessing
import socket

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from qkv.distributed import (
    ring_attention,
    sequence_layout,
    sequence_positions,
    shard_sequence,
    unshard_sequence,
)
from qkv.distributed.layout import SequenceLayout
from qkv.errors import InputError
from qkv.functional.patterns import alibi, relative_bias, softcap
from qkv.functional.positions import alibi_slopes
from tests.ring_worker import CASES, FunctionMask, compare_worker, dying_worker, reference

TOLERANCE = {"torch.float32": 1e-5, "torch.float64": 1e-10}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_processes(target, world: int, *args, timeout: float = 240) -> list[int]:
    """Start ``world`` spawned processes of ``target(rank, world, port, *args)``; their exit
    codes (None for one still running after ``timeout`` seconds, which is then killed)."""
    spawn = multiprocessing.get_context("spawn")
    port = free_port()
    processes = [spawn.Process(target=target, args=(r, world, port, *args)) for r in range(world)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    codes = [process.exitcode for process in processes]
    for process in processes:
        if process.is_alive():
            process.kill()
    return codes


@pytest.mark.parametrize(
    ("world", "cases"),
    [
        (2, list(CASES)),
        (
            4,
            [
                "plain",
                "causal",
                "gqa_causal",
                "masked_rows_causal",
                "pieces_causal",
                "alibi_causal",
            ],
        ),
    ],
)
def test_ring_attention_equals_one_process(tmp_path, world, cases):
    out = tmp_path / "errors.json"
    assert run_processes(compare_worker, world, str(out), cases) == [0] * world
    errors = json.loads(out.read_text())
    assert len(errors) == 2 * 2 * len(cases)  # every case ran, in both dtypes
    for key, value in errors.items():
        if key.endswith("/zero_rows"):
            continue
        limit = TOLERANCE[key.split("/")[1]]
        assert max(value) <= limit, f"{key}: output, dq, dk, dv differ by {value}"
    # the masked cases do have rows that attend nothing (their output is 0, checked above)
    for name in ("masked_rows", "masked_rows_causal"):
        if name in cases:
            assert errors[f"{name}/torch.float64/zero_rows"] > 0


def test_a_dead_rank_stops_the_others_with_one_line(tmp_path):
    codes = run_processes(dying_worker, 3, str(tmp_path), timeout=60)
    assert codes == [0, 1, 0]  # nobody hung; rank 1 died
    for rank in (0, 2):
        seconds, message = (tmp_path / f"rank{rank}.txt").read_text().split("\n", 1)
        assert message.startswith("RingPeerError: ring_attention on rank"), message
        assert "\n" not in message and "a rank died or hung" in message
        assert float(seconds) < 30


def test_on_one_process_it_is_plain_attention():
    q, k, v = torch.randn(2, 4, 12, 8), torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8)
    for causal in (False, True):
        got = ring_attention(q, k, v, causal=causal)
        torch.testing.assert_close(got, reference(q, k, v, causal, None), atol=1e-6, rtol=0)
    assert torch.equal(unshard_sequence(shard_sequence(q, 2, causal=True), 2, causal=True), q)


def test_gradcheck_float64_with_a_block_mask():
    q, k, v = (torch.randn(1, 2, 6, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = FunctionMask(lambda b, h, i, j: (i // 3) == (j // 3))
    assert torch.autograd.gradcheck(
        lambda *t: ring_attention(*t, causal=True, block_mask=mask), (q, k, v)
    )


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64_in_pieces_with_alibi_and_a_block_mask(causal):
    q, k, v = (torch.randn(2, 2, 8, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = FunctionMask(lambda b, h, i, j: (i // 5) == (j // 5))
    score = alibi(alibi_slopes(2))
    assert torch.autograd.gradcheck(
        lambda *t: ring_attention(
            *t, causal=causal, block_mask=mask, score_mod=score, block_size=3
        ),
        (q, k, v),
    )
    got = ring_attention(q, k, v, causal=causal, block_mask=mask, score_mod=score, block_size=3)
    torch.testing.assert_close(got, reference(q, k, v, causal, mask, score), atol=1e-12, rtol=0)


def test_a_score_mod_must_be_a_bias_that_needs_no_gradient():
    q = torch.randn(1, 2, 6, 4)
    with pytest.raises(InputError, match="not depending on the score"):
        ring_attention(q, q, q, score_mod=softcap(2.0))
    table = torch.zeros(2, 7, requires_grad=True)
    with pytest.raises(InputError, match="no gradient"):
        ring_attention(q, q, q, score_mod=relative_bias(table))
    fixed = relative_bias(torch.randn(2, 7))  # a fixed table is a bias: supported
    want = reference(q, q, q, True, None, fixed)
    torch.testing.assert_close(ring_attention(q, q, q, causal=True, score_mod=fixed), want)


def test_bad_input_is_named():
    q = torch.randn(1, 2, 6, 4)
    with pytest.raises(InputError, match="score_mod must be a function"):
        ring_attention(q, q, q, score_mod="alibi")
    with pytest.raises(InputError, match="block_size"):
        ring_attention(q, q, q, block_size=0)
    with pytest.raises(InputError, match="mask_mod"):
        ring_attention(q, q, q, block_mask=torch.ones(6, 6, dtype=torch.bool))
    with pytest.raises(InputError, match="same part"):
        ring_attention(q, q[:, :, :4], q[:, :, :4])
    with pytest.raises(InputError, match="even length"):
        ring_attention(q[:, :, :5], q[:, :, :5], q[:, :, :5], causal=True)
    with pytest.raises(InputError, match="multiple of 2"):
        sequence_layout(7, causal=True)


@given(st.integers(1, 8))
def test_zigzag_gives_every_rank_the_same_causal_work_and_covers_the_sequence(world):
    layouts = [SequenceLayout(r, world, 2 * world, (r, 2 * world - 1 - r), 1) for r in range(world)]
    held = sorted(chunk for layout in layouts for chunk in layout.chunks)
    assert held == list(range(2 * world))
    # causal pairs (query chunk c, key chunk <= c) each rank computes: all equal
    assert {sum(c + 1 for c in layout.chunks) for layout in layouts} == {2 * world + 1}


def test_positions_of_one_process_are_the_sequence():
    assert torch.equal(sequence_positions(8, causal=True), torch.arange(8))


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="the NCCL ring needs two GPUs")
def test_nccl_ring_equals_one_process(tmp_path):
    out = tmp_path / "errors.json"
    assert run_processes(compare_worker, 2, str(out), ["causal", "gqa"], "nccl") == [0, 0]
    errors = json.loads(out.read_text())
    for key, value in errors.items():
        if not key.endswith("/zero_rows"):
            assert max(value) <= 10 * TOLERANCE[key.split("/")[1]], key


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_one_gpu_the_pieces_masks_and_biases_stay_on_the_device():
    """World 1 on CUDA (no transport): the tiles, the mask and the ALiBi bias are built on
    the query's device; the result equals the CPU reference."""
    cpu = [torch.randn(2, 4, 24, 8, dtype=torch.float64) for _ in range(3)]
    mask = FunctionMask(lambda b, h, i, j: (i // 7) == (j // 7))
    score = alibi(alibi_slopes(4).cuda())
    parts = [t.cuda().requires_grad_() for t in cpu]
    got = ring_attention(*parts, causal=True, block_mask=mask, score_mod=score, block_size=5)
    got.sum().backward()
    full = [t.clone().requires_grad_() for t in cpu]
    want = reference(*full, True, mask, alibi(alibi_slopes(4)))
    want.sum().backward()
    torch.testing.assert_close(got.cpu(), want, atol=1e-10, rtol=0)
    for part, ref in zip(parts, full, strict=True):
        torch.testing.assert_close(part.grad.cpu(), ref.grad, atol=1e-10, rtol=0)
