"""The toy family trains, evaluates and opens in the explorer through the CLI's own entry
point, registered by its record alone (nothing of qkv names it)."""

import json

import pytest
import torch

from qkv.cli.main import main
from qkv.explore import explore, write_html
from qkv.families import families, family_of_type

from . import FAMILY
from .model import TOY_MODEL


def test_the_toy_is_registered_by_its_record():
    assert FAMILY in families() and family_of_type(TOY_MODEL) is FAMILY
    # its own modules are found from its record: its package's, none of qkv's
    package = __name__.rpartition(".")[0]
    assert FAMILY.modules == {f"{package}.family", f"{package}.model"}


def test_the_toy_trains_evaluates_and_opens_in_the_explorer(tmp_path, capsys):
    run = tmp_path / "toy"
    args = ["train", "toy", "--out", str(run), "--max-steps", "8", "--threads", "1"]
    assert main([*args, "--examples", "48", "--d-model", "8"]) == 0
    out = capsys.readouterr().out
    assert "done: 8 steps" in out and f"checkpoint: {run}" in out
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    valid = [entry["valid_loss"] for entry in log if entry["event"] == "valid"]
    assert len(valid) >= 2 and valid[-1] < valid[0]  # it learns, through the family's parts
    assert all("accuracy" in entry for entry in log if entry["event"] == "valid")

    assert main(["evaluate", "--checkpoint", str(run), "--json", "--limit", "16"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert 0.0 <= scores["accuracy"] <= 1.0

    page = tmp_path / "toy.html"
    assert main(["explore", "--checkpoint", str(run), "17", "2345", "--out", str(page)]) == 0
    out = capsys.readouterr().out
    assert "17 ->" in out and "2345 ->" in out and page.is_file()
    html = page.read_text(encoding="utf-8")
    assert "toy: 2 heads over the digits" in html  # the page kind the adapter declares


def test_a_setup_field_is_an_option_with_its_help(capsys):
    try:
        main(["train", "toy", "--help"])
    except SystemExit:
        pass
    help_text = capsys.readouterr().out
    assert "--d-model" in help_text and "the attention's width" in help_text
    assert "--examples" in help_text and "(default: 64)" in help_text


@pytest.mark.browser
def test_the_toy_s_own_kind_of_page_draws_its_weights(tmp_path_factory):
    """The page draws a kind it has no entry for from what the adapter declares."""
    from tests.test_explore_browser import cells, open_page, start_browser

    from .family import DigitTokens
    from .model import ToyClassifier, ToyConfig

    torch.manual_seed(0)
    model = ToyClassifier(ToyConfig()).eval()
    folder = tmp_path_factory.mktemp("toy-page")
    data = explore(model, ["1779"], tokenizer=DigitTokens())
    write_html(data, folder / "toy.html")
    weights = model(torch.tensor([[2, 8, 8, 10]]), need_weights=True).attention["self"][0][0]
    browser_run = start_browser(tmp_path_factory)
    browser = next(browser_run)
    try:
        open_page(browser, {"folder": folder}, "toy")
        info = browser.find_element("id", "model-info").text
        assert info == f"toy: {model.config.num_heads} heads over the digits"
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": 0, "head": 1})
        drawn = cells(browser)
        assert len(drawn) == 16
        for (row, col), value in drawn.items():
            assert abs(float(value) - float(weights[1, row, col])) <= 1e-3
    finally:
        browser_run.close()
