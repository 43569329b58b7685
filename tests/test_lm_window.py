"""LMConfig(window=W): sliding-window causal attention on the flex kernel."""

import pytest
import torch
import torch.nn.functional as F

from qkv.errors import InputError
from qkv.models import LMConfig
from qkv.models.lm_config import LM_POSITION_KINDS

from .test_lm import VOCAB, random_ids, tiny_lm


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_flex_window_equals_the_dense_window_mask(positions):
    model = tiny_lm(positions, window=5)
    ids = random_ids(2, 30)
    flex = model(ids).logits  # block mask on the flex kernel
    dense = model(ids, need_weights=True).logits  # the same window as a boolean mask
    torch.testing.assert_close(flex, dense, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", LM_POSITION_KINDS)
def test_windowed_cached_steps_equal_the_full_pass(positions):
    model = tiny_lm(positions, window=4)
    ids = random_ids(2, 20)
    full = F.log_softmax(model(ids).logits, dim=-1)
    state = model.start(ids[:, :9])
    for t in range(9, 20):
        output = model.step(ids[:, t], state)
        torch.testing.assert_close(output.log_probs, full[:, t], rtol=1e-5, atol=1e-5)
        state = output.state


def test_tokens_beyond_the_receptive_field_change_nothing():
    model = tiny_lm("rope", window=4)  # 2 layers: position t sees t - 6 .. t
    ids = random_ids(1, 24)
    changed = ids.clone()
    changed[:, :10] = (changed[:, :10] + 3) % (VOCAB - 4) + 4
    before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, 17:], after[:, 17:], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, 10:16], after[:, 10:16])


@pytest.mark.parametrize("window", [0, -2, 2.5, True])
def test_window_must_be_a_positive_int(window):
    with pytest.raises(InputError, match="window"):
        LMConfig(VOCAB, window=window)


def test_the_task_setup_refuses_window_zero_early():
    from qkv.tasks.lm import LMSetup, lm_config

    with pytest.raises(InputError, match="window=0") as refused:
        LMSetup(window=0)
    assert refused.value.fields == ("window",)  # the CLI names the flag that sets it
    assert lm_config(LMSetup(window=64), VOCAB).window == 64


def test_the_cli_names_the_window_flag(tmp_path, capsys):
    from qkv.cli.main import main

    code = main(["train", "lm", "--out", str(tmp_path / "run"), "--window", "0"])
    assert code == 2 and "--window 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
