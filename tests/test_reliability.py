"""Training that loses nothing: signals, a second process on the same run, a full disk, and
checkpoints from elsewhere that ask for absurd sizes or carry code."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

import qkv.training.checkpoint as checkpoint_module
import qkv.training.weights as weights_module
from qkv.errors import CheckpointError, RunError
from qkv.training import load_checkpoint, save_checkpoint
from qkv.training.checkpoint import load_trainer_state
from qkv.training.lock import LOCK_FILE, RunLock
from tests.train_worker import (
    ToyConfig,
    ToySeq2Seq,
    interruptible_copy_training,
    parameters,
    run_copy_training,
    slow_copy_training,
)

STEPS = 12


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, torch.Tensor]:
    """The weights of the uninterrupted run that every interrupted one must end with."""
    return parameters(run_copy_training(tmp_path_factory.mktemp("whole"), max_steps=STEPS))


def start(target, out_dir: Path) -> multiprocessing.Process:
    """A child process training ``out_dir`` (spawned: forking a parent whose thread pools
    ran can deadlock the child)."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=(out_dir, STEPS))
    process.start()
    return process


def wait_for_step(process, out_dir: Path, step: int) -> None:
    """Until the child's log shows ``step`` trained (it logs every step)."""
    deadline = time.monotonic() + 120
    while True:
        assert process.is_alive(), f"the worker ended early with exit code {process.exitcode}"
        assert time.monotonic() < deadline, f"the worker did not reach step {step} in 120 s"
        log = out_dir / "log.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        if any(json.loads(line).get("step", 0) >= step for line in lines if line.strip()):
            return
        time.sleep(0.005)


def assert_same(reference: dict, model: torch.nn.Module) -> None:
    for name, value in reference.items():
        assert torch.equal(value, parameters(model)[name]), name


# ---------------------------------------------------------------------------- signals


@pytest.mark.parametrize("number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_finishes_the_step_checkpoints_and_resume_continues_exactly(
    tmp_path, reference, number, code
):
    out_dir = tmp_path / "run"
    process = start(interruptible_copy_training, out_dir)
    wait_for_step(process, out_dir, 4)  # past the checkpoint at 3: the signal's must be newer
    os.kill(process.pid, number)
    process.join(60)
    assert process.exitcode == code
    stopped = json.loads((out_dir / "last.json").read_text())["step"]
    assert 4 <= stopped < STEPS  # newer than the last scheduled checkpoint before the signal
    message = (out_dir / "interrupted.txt").read_text()
    assert signal.Signals(number).name in message and "resume=True" in message
    assert f"after step {stopped}" in message
    end = json.loads((out_dir / "log.jsonl").read_text().splitlines()[-1])
    assert end == {**end, "event": "end", "reason": "interrupted", "step": stopped}
    assert not list((out_dir / "checkpoints").glob(".tmp-*"))
    resumed = run_copy_training(out_dir, max_steps=STEPS, resume=True)
    assert_same(reference, resumed)


# ---------------------------------------------------------------------------- one run per folder


def test_a_second_process_into_the_same_folder_is_refused_and_damages_nothing(tmp_path, reference):
    out_dir = tmp_path / "run"
    process = start(slow_copy_training, out_dir)
    wait_for_step(process, out_dir, 2)
    log_before = (out_dir / "log.jsonl").read_text()
    for resume in (False, True):
        with pytest.raises(RunError, match=f"in use by another training run \\(pid {process.pid}"):
            run_copy_training(out_dir, max_steps=STEPS, resume=resume)
    # the refused runs touched nothing: the first run's log only grew, and it ends as if alone
    assert (out_dir / "log.jsonl").read_text().startswith(log_before)
    process.join(120)
    assert process.exitcode == 0
    assert_same(reference, load_checkpoint(out_dir / "checkpoints" / f"step-{STEPS:06d}").model)
    # the lock went with its process: the folder is free again
    with RunLock(out_dir):
        pass


def test_a_lock_left_by_a_crashed_process_is_stale(tmp_path, reference):
    out_dir = tmp_path / "run"
    process = start(slow_copy_training, out_dir)
    wait_for_step(process, out_dir, 4)
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    assert str(process.pid) in (out_dir / LOCK_FILE).read_text()  # the file stays behind...
    resumed = run_copy_training(out_dir, max_steps=STEPS, resume=True)  # ...but locks nothing
    assert_same(reference, resumed)
    # a lock file naming a process long gone, never locked: also no obstacle
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / LOCK_FILE).write_text("pid 999999 on elsewhere\n")
    run_copy_training(tmp_path / "other", max_steps=1)


# ---------------------------------------------------------------------------- a full disk


def test_a_full_disk_names_the_disk_keeps_the_last_checkpoint_and_resume_works(
    tmp_path, reference, monkeypatch
):
    out_dir = tmp_path / "run"
    real_save_file = checkpoint_module.save_file
    written = []

    def fills_up(tensors, filename, metadata=None):
        written.append(filename)
        if len(written) == 2:  # the checkpoint of step 6
            Path(filename).write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint_module, "save_file", fills_up)
    with pytest.raises(RunError, match="is full") as caught:
        run_copy_training(out_dir, max_steps=STEPS)
    assert str(out_dir) in str(caught.value) and "MiB free" in str(caught.value)
    assert json.loads((out_dir / "last.json").read_text())["step"] == 3
    assert load_checkpoint(out_dir).step == 3 and load_trainer_state(
        out_dir / "checkpoints" / "step-000003"
    )
    assert not list((out_dir / "checkpoints").glob(".tmp-*"))  # its space given back
    monkeypatch.setattr(checkpoint_module, "save_file", real_save_file)
    assert_same(reference, run_copy_training(out_dir, max_steps=STEPS, resume=True))


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (as root, where mounting is allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def fill(disk: Path, *, leave: int) -> Path:
    """Fill ``disk`` until ``leave`` bytes stay free."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > leave:
            try:
                handle.write(b"\0" * 4096)
                handle.flush()
            except OSError:
                break
    return filler


def test_a_real_full_disk_during_a_checkpoint(small_disk, reference):
    out_dir = small_disk / "run"
    run_copy_training(out_dir, max_steps=3)  # a checkpoint at 3
    filler = fill(small_disk, leave=16 * 1024)  # room for log lines, not a checkpoint
    with pytest.raises(RunError, match="is full") as caught:
        run_copy_training(out_dir, max_steps=STEPS, resume=True)
    assert str(small_disk) in str(caught.value)
    assert load_checkpoint(out_dir).step == 3
    filler.unlink()
    assert_same(reference, run_copy_training(out_dir, max_steps=STEPS, resume=True))


# ---------------------------------------------------------------------------- files from elsewhere


def saved_toy(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(tmp_path, ToySeq2Seq(ToyConfig()), step=1, trainer_state={"a": 1})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("vocab_size", 10**12, r"parameters, more than the 1e\+10 allowed"),
        ("dim", 10**5, r"parameters, more than the 1e\+10 allowed"),
        ("dim", 10**9, "too large to exist"),
    ],
)
def test_a_config_asking_for_absurd_sizes_is_refused_before_allocating(
    tmp_path, field, value, message
):
    directory = saved_toy(tmp_path)
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text())
    config["model"][field] = value
    config_file.write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(directory)


def test_weights_that_do_not_match_are_refused_from_the_header_alone(tmp_path, monkeypatch):
    directory = saved_toy(tmp_path)
    config_file = directory / "config.json"
    config = json.loads(config_file.read_text())
    config["model"]["dim"] = 8
    config_file.write_text(json.dumps(config))

    def never(*args, **kwargs):
        raise AssertionError("the tensors were read before the header was checked")

    monkeypatch.setattr(weights_module, "load_file", never)
    with pytest.raises(
        CheckpointError, match=r"combine.weight \(16, 32\) in the file vs \(8, 16\)"
    ):
        load_checkpoint(directory)


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {Payload.target}",))


def test_a_trainer_state_that_carries_code_is_refused_without_running_it(tmp_path):
    directory = saved_toy(tmp_path)
    Payload.target = tmp_path / "pwned"
    torch.save({"state": Payload()}, directory / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="trainer_state.pt is corrupt"):
        load_trainer_state(directory)
    assert not Payload.target.exists()
