"""User mistakes that used to escape as "this is a bug in qkv" tracebacks (or, for one, exit 0
as if it had trained): each is now one line, exit 2, naming the field and the flag that sets
it; and a command refused before training leaves the run folder it was given as it was."""

from __future__ import annotations

import json

import pytest
import torch

from qkv.cli.main import exit_code_for, main
from qkv.training.distributed import DistributedContext
from qkv.training.progress import LossWindow

CAPTIONER = [
    "--image-size", "32", "--grid", "4", "--feature-dim", "16", "--embedding-dim", "16",
    "--hidden-dim", "32", "--attention-dim", "16", "--min-count", "1", "--train-size", "4",
    "--valid-size", "2", "--max-steps", "1", "--max-tokens", "64", "--threads", "1",
    "--device", "cpu",
]  # fmt: skip
CLASSIFIER = [
    "--image-size", "32", "--feature-dim", "8", "--train-size", "8", "--valid-size", "4",
    "--max-steps", "1", "--max-tokens", "8", "--threads", "1", "--device", "cpu",
]  # fmt: skip


def _error(argv: list[str], capsys) -> str:
    """The one line a refused command prints (it must exit 2, not 1 with a traceback)."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("qkv: error:"), err
    return err


@pytest.fixture(scope="module")
def captioner(tmp_path_factory):
    out = tmp_path_factory.mktemp("captioner") / "run"
    assert main(["train", "captioning", "--data", "shapes", "--out", str(out), *CAPTIONER]) == 0
    return out


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    out = tmp_path_factory.mktemp("classifier") / "run"
    assert main(["train", "classifier", "--data", "shapes", "--out", str(out), *CLASSIFIER]) == 0
    return out


def test_out_that_is_a_file_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "notes.txt"
    out.write_text("mine")
    argv = ["train", "translation", "--data", "dates", "--out", str(out), "--max-steps", "1"]
    assert "is a file, not a run folder" in _error(argv, capsys)
    assert out.read_text() == "mine"


@pytest.mark.parametrize(
    "content, words",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"images": [{"filename": "a.png", "sentences": []}]}), "'split'"),
    ],
    ids=["malformed", "no split"],
)
def test_a_broken_karpathy_json_is_one_line(content, words, tmp_path, capsys):
    data = tmp_path / "captions.json"
    data.write_text(content)
    out = tmp_path / "run"
    argv = ["train", "captioning", "--data", str(data), "--out", str(out)]
    assert words in _error(argv, capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--image-size", "0"], "image_size=0 must be a positive integer (set by --image-size 0)"),
        (["--train-size", "-5"], "train_size=-5"),
        (["--min-count", "100000"], "--min-count"),
        (["--resume"], "no checkpoint to resume from"),
        (["--lambda", "-1"], "doubly_stochastic=-1.0"),
    ],
    ids=["image size 0", "train size -5", "min count above all", "resume nothing", "lambda"],
)
def test_captioning_mistakes_are_one_line_and_touch_nothing(flags, words, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "captioning", "--data", "shapes", "--out", str(out), *CAPTIONER, *flags]
    assert words in _error(argv, capsys)
    assert not out.exists()


def test_resume_into_an_empty_folder_is_the_same_error_for_every_family(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    lines = set()
    for task, data in [("translation", "dates"), ("captioning", "shapes"), ("lm", "kjv")]:
        argv = ["train", task, "--data", data, "--out", str(empty), "--resume"]
        lines.add(_error(argv, capsys))
    argv = ["train", "classifier", "--data", "shapes", "--out", str(empty), "--resume"]
    lines.add(_error(argv, capsys))
    assert len(lines) == 1 and "has no checkpoint to resume from" in lines.pop()
    assert list(empty.iterdir()) == []


def test_caption_with_beam_0_is_refused(captioner, tmp_path, capsys):
    from PIL import Image

    picture = tmp_path / "scene.png"
    Image.new("RGB", (32, 32), "white").save(picture)
    argv = ["caption", "--checkpoint", str(captioner), str(picture), "--beam", "0"]
    assert "beam=0 must be a whole number >= 1 (set by --beam 0)" in _error(argv, capsys)


def test_classify_count_below_one_is_refused(classifier, tmp_path, capsys):
    argv = ["classify", "--checkpoint", str(classifier), "--count", "-1"]
    argv += ["--attention-out", str(tmp_path / "x.png")]
    assert "count=-1 must be a positive number of items (set by --count -1)" in _error(argv, capsys)
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("flag", ["--image-size", "--grid"])
def test_a_classifier_with_a_size_of_0_is_refused_not_trained(flag, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "classifier", "--data", "shapes", "--out", str(out), flag, "0"]
    assert f"=0 must be a positive integer (set by {flag} 0)" in _error(argv, capsys)
    assert not out.exists()


def test_a_diverged_run_is_a_mistake_to_name_not_a_bug():
    context = DistributedContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    window = LossWindow(torch.device("cpu"), loss=float("nan"), tokens=10.0)
    with pytest.raises(FloatingPointError) as raised:  # what it was, and still is
        window.checked_loss(context, step=7)
    assert exit_code_for(raised.value) == 2
    assert "became nan by step 7; lower lr or set clip_norm" in str(raised.value)


def test_evaluate_scores_a_classifier_as_classify_does(classifier, capsys):
    assert main(["evaluate", "--checkpoint", str(classifier), "--limit", "20", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert main(["classify", "--checkpoint", str(classifier), "--limit", "20", "--json"]) == 0
    assert evaluated == json.loads(capsys.readouterr().out) and evaluated["count"] == 20


def test_evaluate_gives_a_language_models_perplexity(tmp_path, capsys):
    import math

    from qkv.tasks.lm import context_loss, encode_text, load_lm

    text = tmp_path / "text.txt"
    text.write_text("".join(f"line {i} of a small text to model.\n" for i in range(60)))
    out = tmp_path / "lm"
    argv = ["train", "lm", "--data", str(text), "--out", str(out), "--context", "16"]
    assert main([*argv, "--max-steps", "2", "--threads", "1", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    lm = load_lm(out)
    valid = "".join(f"line {i} of a small text to model.\n" for i in range(57, 60))
    expected = context_loss(lm.model, encode_text(lm.tokenizer, valid), context=16)
    assert scores["loss"] == pytest.approx(expected)
    assert scores["perplexity"] == pytest.approx(math.exp(expected))
