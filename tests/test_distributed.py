"""Multi-process training: two gloo processes on CPU equal one process with both batches."""

from __future__ import annotations

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp

from qkv.training import load_checkpoint, setup_distributed
from qkv.training.distributed import resolve_device
from tests.train_worker import (
    distributed_batches,
    distributed_data,
    distributed_worker,
    parameters,
    single_process_reference,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_processes_equal_one_process_with_the_concatenated_batches(tmp_path):
    steps = 3
    data = distributed_data()
    tokens = [
        [sum(data.target_lengths[i] - 1 for i in half) for half in step]
        for step in distributed_batches()
    ]
    # the ranks see different token counts, so averaging per-rank means would be wrong
    assert all(rank0 != rank1 for rank0, rank1 in tokens)

    single, initial, result = single_process_reference(tmp_path / "single", steps)

    # spawn, not fork: a forked child of a parent whose thread pools ran can deadlock
    port = free_port()
    mp.start_processes(
        distributed_worker, args=(2, port, str(tmp_path), steps), nprocs=2, start_method="spawn"
    )

    rank0 = torch.load(tmp_path / "params-0.pt")
    rank1 = torch.load(tmp_path / "params-1.pt")
    for name, value in parameters(single).items():
        assert torch.equal(rank0[name], rank1[name]), name  # DDP keeps the replicas identical
        assert torch.allclose(rank0[name], value, atol=1e-5, rtol=0), name
        assert not torch.allclose(initial[name], value, atol=1e-3), name  # training moved it

    # rank 0 alone wrote the log and the checkpoint; validation agreed with one process
    records = [
        json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r["event"] == "train"] == [1, 2, 3]
    single_records = (tmp_path / "single" / "log.jsonl").read_text().splitlines()
    valid = [r for r in records if r["event"] == "valid"][-1]
    assert valid["valid_loss"] == pytest.approx(result.valid["valid_loss"], abs=1e-5)
    train_losses = [r["loss"] for r in records if r["event"] == "train"]
    single_losses = [json.loads(line)["loss"] for line in single_records if '"train"' in line]
    assert train_losses == pytest.approx(single_losses, abs=1e-6)
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.step == steps
    assert torch.equal(loaded.model.state_dict()["output.bias"], rank0["output.bias"])


def test_without_torchrun_variables_training_is_single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    context = setup_distributed("cpu")
    assert (context.rank, context.world_size, context.is_main) == (0, 1, True)
    assert context.device == torch.device("cpu")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR is not set"):
        setup_distributed("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without GPU")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")
    assert resolve_device("auto") == torch.device("cpu")


def test_a_lost_peer_is_one_line_and_other_errors_pass_through():
    from qkv.training.distributed import DistributedContext, PeerLostError, peer_lost

    context = DistributedContext(1, 2, 1, torch.device("cpu"))
    gloo = RuntimeError(
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:29099: Connection reset by peer. This is typically caused by ..."
    )
    error = peer_lost(gloo, context)
    assert isinstance(error, PeerLostError)
    assert str(error).startswith("rank 1: lost contact with another process of the run (Read")
    assert "Connection reset by peer" in str(error) and "resume=True" in str(error)
    bug = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    assert peer_lost(bug, context) is bug
    assert peer_lost(gloo, DistributedContext(0, 1, 0, torch.device("cpu"))) is gloo
