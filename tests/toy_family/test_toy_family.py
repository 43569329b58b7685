"""The toy family trains, evaluates and opens in the explorer through the CLI's own entry
point, registered by its record alone (nothing of qkv names it)."""

import json

from qkv.cli.main import main
from qkv.families import families, family_of_type

from . import FAMILY
from .model import TOY_MODEL


def test_the_toy_is_registered_by_its_record():
    assert FAMILY in families() and family_of_type(TOY_MODEL) is FAMILY


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
    assert '"kind": "encoder"' in html or '"kind":"encoder"' in html


def test_a_setup_field_is_an_option_with_its_help(capsys):
    try:
        main(["train", "toy", "--help"])
    except SystemExit:
        pass
    help_text = capsys.readouterr().out
    assert "--d-model" in help_text and "the attention's width" in help_text
    assert "--examples" in help_text and "(default: 64)" in help_text
