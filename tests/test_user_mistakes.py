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


# -------------------------------------------------------------------- the option sweep


@pytest.fixture(scope="module")
def runs(tmp_path_factory, captioner, classifier):
    """A tiny run of every family, and the files a user points at by mistake."""
    from PIL import Image

    root = tmp_path_factory.mktemp("sweep")
    pairs = "".join(f"ab{c}\t{c}ba\n" for c in "cdefghijklmnop")
    for split in ("train", "valid", "test"):
        (root / f"{split}.tsv").write_text(pairs)
    (root / "text.txt").write_text("".join(f"line {i} of a small text.\n" for i in range(60)))
    quick = ["--max-steps", "1", "--threads", "1", "--device", "cpu"]
    data = ["--data", str(root / "{split}.tsv"), "--tokenizer", "char", "--max-tokens", "64"]
    assert main(["train", "translation", *data, "--out", str(root / "tr"), *quick]) == 0
    lm = ["--data", str(root / "text.txt"), "--context", "16"]
    assert main(["train", "lm", *lm, "--out", str(root / "lm"), *quick]) == 0
    (root / "empty").write_text("")
    (root / "binary").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00\x00")
    (root / "folder").mkdir()
    Image.new("RGB", (32, 32), "white").save(root / "pic.png")
    return {"root": root, "tr": root / "tr", "lm": root / "lm", "cap": captioner, "cls": classifier}


def _snapshot(folder) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


#: (argv, words of the one line); {tr} {lm} {cap} {cls}: the runs, {root}: their folder,
#: {out}: a run folder (or file) there that a refused command must not create.
NUMERIC = [
    ("translate --checkpoint {tr} --length-penalty -1 abc", "length_penalty=-1.0"),
    ("translate --checkpoint {tr} --length-penalty nan abc", "length_penalty=nan"),
    ("caption --checkpoint {cap} {root}/pic.png --beam 2 --length-penalty -1", "length_penalty"),
    ("caption --checkpoint {cap} {root}/pic.png --beam -1", "beam=-1"),
    ("evaluate --checkpoint {tr} --beam 0", "beam=0"),
    ("evaluate --checkpoint {cap} --limit 0", "limit=0"),
    ("evaluate --checkpoint {cls} --limit -3", "limit=-3"),
    ("evaluate --checkpoint {lm} --limit 0", "limit=0"),
    ("generate --checkpoint {lm} --prompt a --temperature -1", "temperature=-1.0"),
    ("generate --checkpoint {lm} --prompt a --top-k 0", "top_k=0"),
    ("generate --checkpoint {lm} --prompt a --top-p 1.5", "top_p=1.5"),
    ("generate --checkpoint {lm} --prompt a --num-samples 0", "num_samples=0"),
    ("generate --checkpoint {lm} --prompt a --seed -1", "seed=-1"),
    ("attention --checkpoint {tr} abc --out {root}/a.png --head 99", "head=99 does not exist"),
    ("attention --checkpoint {tr} abc --out {root}/a.png --layer 7", "layer=7 does not exist"),
    ("classify --checkpoint {cls} --limit -1", "limit=-1"),
    ("explore --checkpoint {tr} abc --beam 0 --out {out}.html", "beam=0"),
    ("demo --threads 0 --out {out}", "threads=0"),
    ("train lm --data {root}/text.txt --context 0 --out {out}", "context"),
    ("train lm --data {root}/text.txt --batch-size 0 --out {out}", "batch_size"),
    ("train lm --data {root}/text.txt --dropout 2 --out {out}", "dropout"),
    ("train captioning --max-caption-len 0 --out {out}", "max_caption_len=0"),
    ("train captioning --valid-size 0 --out {out}", "valid_size=0"),
    ("train captioning --hidden-dim 0 --out {out}", "hidden_dim"),
    ("train captioning --dropout 1.5 --out {out}", "dropout"),
    ("train classifier --data shapes --train-size 0 --out {out}", "train_size=0"),
    ("train classifier --data shapes --feature-dim -1 --out {out}", "feature_dim=-1"),
    ("train classifier --data shapes --dropout 1.5 --out {out}", "dropout"),
    ("train translation --data dates --max-words 0 --out {out}", "max_words"),
    ("train translation --data dates --beta2 1.5 --out {out}", "betas"),
    ("train translation --data dates --accumulate 0 --out {out}", "accumulate"),
    ("train translation --data dates --plateau-patience 0 --out {out}", "plateau_patience=0"),
]
#: Commands reading a file or folder the user names; {bad} is each of BAD_PATHS in turn.
FILES = [
    "translate --checkpoint {bad} abc",
    "evaluate --checkpoint {bad}",
    "evaluate --checkpoint {tr} --data {bad}",
    "evaluate --checkpoint {cap} --data {bad}",
    "caption --checkpoint {bad} {root}/pic.png",
    "caption --checkpoint {cap} {bad}",
    "curves --checkpoint {bad} --out {root}/c.png",
    "attention --checkpoint {bad} abc --out {root}/a.png",
    "classify --checkpoint {bad}",
    "generate --checkpoint {bad} --prompt a",
    "train translation --data {bad} --out {out}",
    "train captioning --data {bad} --out {out}",
    "train captioning --encoder-from {bad} --out {out}",
    "train classifier --data {bad} --out {out}",
    "train lm --data {bad} --out {out}",
]
BAD_PATHS = ["missing", "folder", "empty", "binary"]


def _refused(template: str, runs: dict, capsys, **names) -> str:
    """Run ``template`` on the runs; it must be refused in one line, leaving every run as it
    was and writing nothing beside them."""
    root = runs["root"]
    values = {key: str(value) for key, value in runs.items()} | names
    out = root / "refused"
    argv = [part.format(out=out, **values) for part in template.split()]
    before = {name: _snapshot(runs[name]) for name in ("tr", "lm", "cap", "cls")}
    entries = sorted(root.iterdir())
    line = _error(argv, capsys)
    assert {name: _snapshot(runs[name]) for name in before} == before
    assert sorted(root.iterdir()) == entries
    return line


@pytest.mark.parametrize("template, words", NUMERIC, ids=[t for t, _ in NUMERIC])
def test_a_numeric_option_out_of_range_is_one_line_and_touches_nothing(
    template, words, runs, capsys
):
    assert words in _refused(template, runs, capsys)


@pytest.mark.parametrize("bad", BAD_PATHS)
@pytest.mark.parametrize("template", FILES)
def test_a_file_option_at_a_missing_folder_empty_or_binary_file_is_one_line(
    template, bad, runs, capsys
):
    _refused(template, runs, capsys, bad=str(runs["root"] / bad))
