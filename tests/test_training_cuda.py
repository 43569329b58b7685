"""Training on a GPU: bf16 steps, fp16 logits in the loss, DDP over NCCL with two GPUs.

Marked ``cuda``: ``python -m pytest -m cuda`` on a GPU machine runs them; without a GPU
they are skipped, saying so.
"""

from __future__ import annotations

import json
import math
import socket

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from qkv.training import TrainConfig, load_checkpoint, seed_everything, sequence_loss, train
from tests.train_worker import (
    ToyConfig,
    ToySampler,
    ToySeq2Seq,
    copy_data,
    distributed_worker,
    single_process_reference,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_training_steps_on_the_gpu_learn_and_checkpoint(tmp_path):
    seed_everything(0)
    model = ToySeq2Seq(ToyConfig(dim=32))
    config = TrainConfig(
        lr=1e-2, warmup_steps=5, epochs=None, max_steps=60, bf16=True, device="cuda",
        validate_every=0, log_every=10, label_smoothing=0.0,
    )  # fmt: skip
    data = copy_data(256, seed=1)
    result = train(model, data, None, config, tmp_path, train_batches=ToySampler(256, 32))
    assert next(model.parameters()).device.type == "cuda"
    losses = [
        r["loss"] for r in map(json.loads, (tmp_path / "log.jsonl").open()) if r["event"] == "train"
    ]
    # an untrained model scores ln(10) = 2.3 nats per token
    assert all(map(math.isfinite, losses)) and losses[-1] < 0.7 * losses[0]
    loaded = load_checkpoint(tmp_path, map_location="cpu")
    assert loaded.step == result.steps == 60
    assert torch.equal(loaded.model.output.bias, model.output.bias.cpu())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_give_a_float32_loss_equal_to_the_float32_one(dtype):
    generator = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(3, 5, 11, device="cuda", generator=generator).to(dtype)
    logits.requires_grad_(True)
    target = torch.randint(1, 11, (3, 5), device="cuda", generator=generator)
    target[0, 3:] = 0
    loss_sum, tokens = sequence_loss(logits, target, label_smoothing=0.1)
    expected = F.cross_entropy(
        logits.float().reshape(-1, 11), target.reshape(-1), ignore_index=0,
        label_smoothing=0.1, reduction="sum",
    )  # fmt: skip
    assert loss_sum.dtype == torch.float32 and int(tokens) == 13
    assert torch.allclose(loss_sum, expected, rtol=1e-5)
    loss_sum.backward()
    assert logits.grad.dtype == dtype and torch.isfinite(logits.grad.float()).all()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP over NCCL needs 2 GPUs")
def test_two_gpus_over_nccl_equal_one_process(tmp_path):
    steps = 3
    single, _, _ = single_process_reference(tmp_path / "single", steps, device="cuda")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # spawn: CUDA cannot be used in a child forked after the parent initialised it
    mp.start_processes(
        distributed_worker, args=(2, port, str(tmp_path), steps, "cuda"), nprocs=2,
        start_method="spawn",
    )  # fmt: skip
    ranks = [torch.load(tmp_path / f"params-{rank}.pt") for rank in range(2)]
    for name, value in single.named_parameters():
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        assert torch.allclose(ranks[0][name], value.detach().cpu(), atol=1e-4, rtol=0), name
