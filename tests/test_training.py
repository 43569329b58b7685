"""The shared trainer: schedules, loss, config checks, learning, determinism, resume, budgets."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.errors import CheckpointError
from qkv.models import Seq2SeqOutput, register_model
from qkv.training import (
    TrainConfig,
    cosine_schedule,
    inverse_sqrt_schedule,
    load_checkpoint,
    seed_everything,
    sequence_loss,
    train,
)
from tests.train_worker import (
    FixedBatches,
    ToyConfig,
    ToySampler,
    ToySeq2Seq,
    copy_data,
    parameters,
    small_run,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the machine's cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def learning_rates(scheduler, steps: int) -> list[float]:
    """The lr each of the first ``steps`` updates uses."""
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return rates


def optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


# ---------------------------------------------------------------------------- schedules


def test_inverse_sqrt_warms_up_linearly_then_decays_as_in_the_paper():
    warmup, d_model = 4, 512
    rates = learning_rates(inverse_sqrt_schedule(optimizer(2.0), warmup_steps=warmup), 16)
    # by hand: update 1..4 -> 2 * step/4; update 16 -> 2 * sqrt(4/16) = 1
    assert rates[:4] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert rates[15] == pytest.approx(1.0)
    # the paper's d^-0.5 * min(step^-0.5, step * warmup^-1.5), scaled so its peak is lr
    peak = d_model**-0.5 * warmup**-0.5
    paper = [d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) / peak * 2.0 for s in range(1, 17)]
    assert rates == pytest.approx(paper)
    assert max(rates) == pytest.approx(2.0) and rates.index(max(rates)) == warmup - 1


def test_cosine_warms_up_then_decays_to_its_floor():
    scheduler = cosine_schedule(optimizer(1.0), warmup_steps=2, total_steps=10, floor=0.1)
    rates = learning_rates(scheduler, 12)
    assert rates[0] == pytest.approx(0.5) and rates[1] == pytest.approx(1.0)
    assert rates[5] == pytest.approx(0.1 + 0.9 * 0.5)  # update 6: half-way through the decay
    assert rates[9] == pytest.approx(0.1) and rates[11] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[1:], rates[2:], strict=False))


# ---------------------------------------------------------------------------- loss


@settings(max_examples=25, deadline=None)
@given(
    smoothing=st.sampled_from([0.0, 0.1, 0.3]),
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
)
def test_sequence_loss_matches_cross_entropy(smoothing, lengths, seed):
    generator = torch.Generator().manual_seed(seed)
    batch, time, vocab = len(lengths), 5, 7
    logits = torch.randn(batch, time, vocab, generator=generator)
    target = torch.randint(1, vocab, (batch, time), generator=generator)
    for row, length in enumerate(lengths):
        target[row, length:] = 0  # padding
    loss_sum, tokens = sequence_loss(logits, target, label_smoothing=smoothing)
    expected = F.cross_entropy(
        logits.reshape(-1, vocab),
        target.reshape(-1),
        ignore_index=0,
        label_smoothing=smoothing,
        reduction="sum",
    )
    assert int(tokens) == sum(lengths)
    assert torch.allclose(loss_sum, expected, atol=1e-5)


def test_sequence_loss_of_bfloat16_logits_is_float32_and_padding_counts_nothing():
    logits = torch.randn(2, 3, 5).bfloat16()
    loss_sum, tokens = sequence_loss(logits, torch.zeros(2, 3, dtype=torch.long))
    assert loss_sum.dtype == torch.float32 and float(loss_sum) == 0.0 and int(tokens) == 0
    with pytest.raises(ValueError, match="must be"):
        sequence_loss(logits, torch.zeros(2, 4, dtype=torch.long))


# ---------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"lr": 0.0}, "lr=0.0"),
        ({"schedule": "linear"}, "schedule='linear'"),
        ({"accumulate": 0}, "accumulate=0"),
        ({"label_smoothing": 1.0}, "label_smoothing=1.0"),
        ({"epochs": None}, "at least one budget"),
        ({"device": "tpu"}, "device='tpu'"),
        ({"min_lr": 1.0, "lr": 0.1}, "min_lr=1.0"),
        ({"patience": 0}, "patience=0"),
    ],
)
def test_train_config_rejects_bad_values_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)
    with pytest.raises(TypeError, match="warmup_steps"):
        TrainConfig(warmup_steps=2.5)


# ---------------------------------------------------------------------------- training


def test_a_tiny_model_learns_to_copy(tmp_path):
    seed_everything(0)
    model = ToySeq2Seq(ToyConfig(dim=32))
    data, valid = copy_data(512, seed=1), copy_data(64, seed=2)
    config = TrainConfig(
        lr=1e-2,
        warmup_steps=10,
        epochs=None,
        max_steps=100,
        validate_every=0,
        log_every=20,
        label_smoothing=0.0,
        device="cpu",
    )
    result = train(
        model,
        data,
        valid,
        config,
        tmp_path,
        train_batches=ToySampler(512, 32),
        valid_batches=FixedBatches([list(range(64))]),
    )
    # an untrained model scores ln(10) = 2.3 nats per token; copying well is far below
    assert result.valid["valid_loss"] < 0.4, result
    assert result.stop_reason == "max_steps" and result.steps == 100
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["event"] == "train"]
    assert [r["step"] for r in records if r["event"] == "train"] == [20, 40, 60, 80, 100]
    assert losses[-1] < losses[0] / 3
    first_train = next(r for r in records if r["event"] == "train")
    assert {"lr", "tokens_per_second", "elapsed", "epoch"} <= set(first_train)
    assert any(r["event"] == "valid" and "valid_loss" in r for r in records)
    assert records[-1]["event"] == "end" and records[-1]["reason"] == "max_steps"
    # the checkpoint holds exactly the trained model
    loaded = load_checkpoint(tmp_path, expect_type="toy-seq2seq")
    assert loaded.step == 100 and loaded.config == model.config
    for name, value in parameters(model).items():
        assert torch.equal(value, loaded.model.state_dict()[name])


def test_the_same_command_twice_gives_the_same_model(tmp_path):
    first, _ = small_run(tmp_path / "a", max_steps=5, accumulate=2)
    second, _ = small_run(tmp_path / "b", max_steps=5, accumulate=2)
    for name, value in parameters(first).items():
        assert torch.equal(value, parameters(second)[name]), name


def test_resume_continues_exactly_as_if_never_interrupted(tmp_path):
    # 6 batches per epoch, 2 per step: 3 steps per epoch; stop at step 4 is mid-epoch
    whole, _ = small_run(tmp_path / "whole", max_steps=8, accumulate=2, log_every=1)
    _, first = small_run(tmp_path / "cut", max_steps=4, accumulate=2, log_every=1)
    assert first.stop_reason == "max_steps" and first.steps == 4 and first.epochs == 1
    resumed, result = small_run(
        tmp_path / "cut", max_steps=8, accumulate=2, log_every=1, resume=True
    )
    assert result.steps == 8
    for name, value in parameters(whole).items():
        assert torch.equal(value, parameters(resumed)[name]), name

    # the resumed log reads like the uninterrupted one, step for step
    def train_losses(run):
        lines = (tmp_path / run / "log.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["event"] == "train"]

    assert train_losses("cut") == train_losses("whole")


def test_resume_refuses_other_settings_and_missing_checkpoints(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        small_run(tmp_path / "empty", max_steps=2, resume=True)
    small_run(tmp_path / "run", max_steps=2)
    with pytest.raises(ValueError, match="already holds a run"):
        small_run(tmp_path / "run", max_steps=3)
    with pytest.raises(ValueError, match=r"model\.dim 16 -> 8"):
        small_run(tmp_path / "run", max_steps=3, resume=True, model_config=ToyConfig(dim=8))
    with pytest.raises(ValueError, match=r"train\.lr 0\.01 -> 0\.02"):
        small_run(tmp_path / "run", max_steps=3, resume=True, lr=2e-2)
    with pytest.raises(ValueError, match="training data"):
        small_run(tmp_path / "run", max_steps=3, resume=True, data=copy_data(24, seed=99))
    before = json.loads((tmp_path / "run" / "last.json").read_text())
    assert before["step"] == 2  # the refusals left the checkpoint alone
    _, result = small_run(tmp_path / "run", max_steps=3, resume=True)  # budgets may change
    assert result.steps == 3


def test_resume_names_an_optimizer_state_of_other_parameters(tmp_path):
    """A run saved when the model had other parameters (attention's Q, K, V as three
    matrices, before they were stacked) cannot restore its optimizer: one clear error."""
    small_run(tmp_path / "run", max_steps=2)
    last = tmp_path / "run" / json.loads((tmp_path / "run" / "last.json").read_text())["checkpoint"]
    state_file = last / "trainer_state.pt"
    state = torch.load(state_file, weights_only=False)
    group = state["optimizer"]["param_groups"][0]
    group["params"] = [*group["params"], max(group["params"]) + 1]  # one parameter too many
    torch.save(state, state_file)
    with pytest.raises(CheckpointError, match="optimizer state .* does not fit"):
        small_run(tmp_path / "run", max_steps=3, resume=True)


def test_resume_names_weights_built_differently_by_an_older_version(tmp_path):
    from safetensors.torch import load_file, save_file

    small_run(tmp_path / "run", max_steps=2)
    last = tmp_path / "run" / json.loads((tmp_path / "run" / "last.json").read_text())["checkpoint"]
    weights = load_file(last / "model.safetensors")
    name = next(iter(weights))
    weights[name] = torch.cat([weights[name], weights[name]])  # another width, same config
    save_file(weights, last / "model.safetensors")
    with pytest.raises(CheckpointError, match="shape mismatch.*older qkv"):
        small_run(tmp_path / "run", max_steps=3, resume=True)


def test_early_stopping_on_bleu_keeps_the_best_checkpoint(tmp_path):
    scores = iter([10.0, 12.0, 11.0, 9.0, 50.0])
    seed_everything(1)
    model = ToySeq2Seq(ToyConfig())
    data = copy_data(24, seed=5)
    config = TrainConfig(
        lr=1e-2,
        warmup_steps=1,
        epochs=None,
        max_steps=20,
        validate_every=1,
        patience=2,
        device="cpu",
    )
    result = train(
        model,
        data,
        data,
        config,
        tmp_path,
        evaluate=lambda m: {"bleu": next(scores)},
        train_batches=ToySampler(24, 4),
        valid_batches=FixedBatches([[0, 1]]),
    )
    assert result.stop_reason == "early_stopping" and result.steps == 4
    assert (result.best_metric, result.best_value, result.best_step) == ("bleu", 12.0, 2)
    assert json.loads((tmp_path / "best.json").read_text())["value"] == 12.0
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-000002",
        "step-000004",
    ]
    assert load_checkpoint(tmp_path).step == 2  # a run directory loads its best


def test_max_minutes_stops_between_steps_and_leaves_a_resumable_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("QKV_TEST_DELAY", "0.02")  # each batch takes at least 20 ms
    _, result = small_run(tmp_path, max_steps=200, max_minutes=0.002)  # 120 ms
    assert result.stop_reason == "max_minutes" and 1 <= result.steps < 200
    assert result.last_checkpoint.name == f"step-{result.steps:06d}"
    monkeypatch.setenv("QKV_TEST_DELAY", "0")
    _, resumed = small_run(tmp_path, max_steps=result.steps + 1, resume=True)
    assert resumed.steps == result.steps + 1


class ToyWithAux(ToySeq2Seq):
    """Adds aux_loss = (pull - 3)^2 on a parameter the logits never use."""

    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.pull = torch.nn.Parameter(torch.zeros(()))

    def forward(self, source, target_input) -> Seq2SeqOutput:
        output = super().forward(source, target_input)
        return Seq2SeqOutput(output.logits, output.attention, (self.pull - 3.0) ** 2)


register_model("toy-aux", ToyConfig, ToyWithAux)


def test_aux_loss_is_trained_and_bf16_autocast_runs(tmp_path):
    model = ToyWithAux(ToyConfig())
    data = copy_data(16, seed=3)
    config = TrainConfig(
        lr=0.1,
        warmup_steps=1,
        epochs=None,
        max_steps=30,
        bf16=True,
        device="cpu",
        clip_norm=0.0,
        validate_every=0,
    )
    result = train(model, data, None, config, tmp_path, train_batches=ToySampler(16, 8))
    # only aux_loss reaches ``pull``: Adam's ~lr-sized steps (sum of lrs ~ 1) move it to 3
    assert 0.5 < model.pull.item() < 3.0 and math.isfinite(result.train_loss)
    assert result.best_checkpoint is None and result.last_checkpoint is not None


def test_default_batches_come_from_the_token_batch_sampler(tmp_path):
    seed_everything(0)
    model = ToySeq2Seq(ToyConfig())
    data = copy_data(40, seed=4)
    config = TrainConfig(lr=1e-2, warmup_steps=1, epochs=1, max_tokens=28, device="cpu")
    result = train(model, data, copy_data(6, seed=7), config, tmp_path)
    assert result.stop_reason == "epochs" and result.epochs == 1 and result.steps >= 40 * 3 // 28


def test_a_loss_gone_to_nan_stops_training_before_any_checkpoint_is_written(tmp_path, monkeypatch):
    import qkv.training.step as step_module

    calls = []

    def loss_that_explodes(logits, target, **options):
        loss_sum, tokens = sequence_loss(logits, target, **options)
        calls.append(1)
        return (loss_sum * float("nan") if len(calls) > 2 else loss_sum), tokens

    monkeypatch.setattr(step_module, "sequence_loss", loss_that_explodes)
    # step 3 goes to nan; it is noticed at the next log line or checkpoint (step 4)
    with pytest.raises(FloatingPointError, match="became nan by step 4"):
        small_run(tmp_path, max_steps=5, validate_every=2)
    assert json.loads((tmp_path / "last.json").read_text())["step"] == 2
    assert torch.isfinite(load_checkpoint(tmp_path).model.output.bias).all()


@pytest.mark.parametrize("failure", ["prepare", "step"])
def test_a_run_that_raises_still_leaves_the_process_group(tmp_path, monkeypatch, failure):
    import qkv.training.step as step_module
    import qkv.training.trainer as trainer_module

    left = []
    context = trainer_module.setup_distributed("cpu")
    monkeypatch.setattr(trainer_module, "setup_distributed", lambda device: context)
    monkeypatch.setattr(
        trainer_module,
        "teardown_distributed",
        lambda ctx, wait_for_peers=True: left.append((ctx, wait_for_peers)),
    )
    if failure == "prepare":
        data = copy_data(0, seed=5)  # nothing to batch: an error before the first step
        with pytest.raises(ValueError, match="empty"):
            train(ToySeq2Seq(ToyConfig()), data, None, TrainConfig(device="cpu"), tmp_path)
    else:

        def broken_loss(*args, **options):
            raise RuntimeError("the loss broke")

        with monkeypatch.context() as patch, pytest.raises(RuntimeError, match="the loss broke"):
            patch.setattr(step_module, "sequence_loss", broken_loss)
            small_run(tmp_path, max_steps=2)
    assert left == [(context, False)]  # left once, without waiting at a barrier
    small_run(tmp_path / "fine", max_steps=1)
    assert left[-1] == (context, True)  # a finished run waits for its peers
