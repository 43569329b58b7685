"""Training the LM with each window spread over two gloo processes (``context_parallel=2``)
equals training it in one process; a rank that dies stops the other, and the run resumes."""

from __future__ import annotations

import json

import pytest
import torch

from qkv.errors import InputError
from qkv.models import DecoderLM, LMConfig
from qkv.training import TrainConfig, load_checkpoint
from tests.ring_worker import TEXT, lm_gradient_worker, lm_training, training_worker
from tests.test_ring_attention import run_processes

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_one_step_under_context_parallel_2_equals_one_process(tmp_path, positions):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    torch.set_num_threads(1)
    lm_training(str(tmp_path / "single"), str(text), 1, 1, positions=positions)
    codes = run_processes(training_worker, 2, str(tmp_path / "ring"), str(text), 2, 1, positions)
    assert codes == [0, 0]
    single = load_checkpoint(tmp_path / "single").model.state_dict()
    ring = load_checkpoint(tmp_path / "ring").model.state_dict()
    torch.manual_seed(0)  # train_lm seeds with config.seed before building the model
    initial = DecoderLM(load_checkpoint(tmp_path / "single").model.config).state_dict()
    for name, value in single.items():
        # AdamW's first update is about lr * sign(grad) = 1e-3 per weight: a wrong gradient
        # would differ by that much; equal gradients differ by rounding only
        assert torch.allclose(ring[name], value, atol=1e-4, rtol=0), name
    assert any(not torch.equal(initial[n], single[n]) for n in single)  # the step moved them
    logs = [
        [json.loads(line) for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
        for run in ("single", "ring")
    ]
    losses = [[r["loss"] for r in log if r["event"] == "train"] for log in logs]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)


def test_a_dead_rank_stops_training_with_one_line_and_resume_continues(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "run"
    codes = run_processes(training_worker, 2, str(out), str(text), 2, 4, "rope", 2, timeout=300)
    assert codes == [3, 1]  # rank 0 stopped with an error; rank 1 died
    message = (out / "error-0.txt").read_text()
    # the ring's own error, or the trainer's where another collective noticed first
    assert message.startswith(("RingPeerError: ", "PeerLostError: ")), message
    assert "\n" not in message and "died or hung" in message, message
    assert load_checkpoint(out).step == 2  # the last checkpoint before the death
    codes = run_processes(training_worker, 2, str(out), str(text), 2, 4, "rope", timeout=300)
    assert codes == [0, 0]
    assert load_checkpoint(out).step == 4
    steps = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if r["event"] == "train"][-2:] == [3, 4]


def test_context_parallel_refuses_what_it_cannot_do():
    with pytest.raises(InputError, match="dropout 0"):
        DecoderLM(LMConfig(20, dropout=0.1)).context_parallel()
    with pytest.raises(TypeError, match="context_parallel"):
        TrainConfig(context_parallel=1.5)


def test_two_data_parallel_groups_of_two_context_parallel_ranks_equal_one_process(tmp_path):
    """World 4 = 2 data-parallel x 2 context-parallel: data rank d reads batches d, d+2, ..
    of the list one process reads, so one step equals one process accumulating batches 0
    and 1 (the step's objective is over every batch of every process)."""
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    torch.set_num_threads(1)
    lm_training(str(tmp_path / "single"), str(text), 1, 1, accumulate=2, positions="rope")
    out = tmp_path / "dp_cp"
    assert run_processes(training_worker, 4, str(out), str(text), 2, 1, "rope") == [0] * 4
    single = load_checkpoint(tmp_path / "single").model.state_dict()
    both = load_checkpoint(out).model.state_dict()
    torch.manual_seed(0)
    initial = DecoderLM(load_checkpoint(tmp_path / "single").model.config).state_dict()
    for name, value in single.items():
        assert torch.allclose(both[name], value, atol=1e-4, rtol=0), name  # see above
    assert any(not torch.equal(initial[n], single[n]) for n in single)
    logs = [
        [json.loads(line) for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
        for run in ("single", "dp_cp")
    ]
    losses = [[r["loss"] for r in log if r["event"] == "train"] for log in logs]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)


@pytest.mark.parametrize("world", [2, 4])
def test_the_sharded_lm_has_the_loss_and_gradients_of_the_whole_window(tmp_path, world):
    cases = [("learned", None), ("sinusoidal", None), ("rope", None), ("alibi", None)]
    for positions, window in [*cases, ("rope", 7)]:  # 7: a sliding window over the ring
        out = tmp_path / f"{positions}-{window}.json"
        codes = run_processes(lm_gradient_worker, world, str(out), positions, window)
        assert codes == [0] * world
        errors = json.loads(out.read_text())
        assert errors.pop("loss (relative; float32)") <= 1e-6
        assert max(errors.values()) <= 1e-10, (positions, window, errors)
