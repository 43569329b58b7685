"""The `qkv` command end to end on a tiny corpus: train, translate, evaluate, attention,
resume; --help teaches; errors are one line and a non-zero exit."""

import errno
import json
import shutil

import pytest

from qkv.cli.main import build_parser, main
from qkv.tasks import Translator, score_translator
from qkv.tasks.presets import recipe_for

COMMANDS = [
    ["demo"],
    ["train", "translation"],
    ["train", "captioning"],
    ["translate"],
    ["evaluate"],
    ["attention"],
    ["caption"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_every_command_has_help_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and "qkv " in out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    pairs = [(f"ab{c}", f"{c}ba") for c in "cdefghijklmnop"]
    (root / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    (root / "valid.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs[:4]), encoding="utf-8")
    out = root / "run"
    args = ["train", "translation", "--data", str(root / "{split}.tsv"), "--out", str(out)]
    args += [
        "--tokenizer",
        "char",
        "--max-steps",
        "4",
        "--validate-every",
        "2",
        "--warmup-steps",
        "2",
    ]
    args += ["--max-tokens", "64", "--device", "cpu", "--log-every", "1", "--threads", "1"]
    assert main(args) == 0
    return root, out, args


def test_train_writes_checkpoints_and_a_log(tiny_run):
    _, out, _ = tiny_run
    assert (out / "last.json").is_file() and (out / "best.json").is_file()
    events = [json.loads(line)["event"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert "train" in events and "valid" in events and events[-1] == "end"


def test_translate_prints_what_the_library_translates(tiny_run, capsys):
    _, out, _ = tiny_run
    assert main(["translate", "--checkpoint", str(out), "abc", "abd", "--beam", "2"]) == 0
    printed = capsys.readouterr().out.split("\n")[:-1]
    expected = Translator.from_checkpoint(out).translate(["abc", "abd"], beam=2)
    assert printed == [t.text for t in expected]


def test_evaluate_prints_the_librarys_scores_by_length(tiny_run, capsys):
    root, out, _ = tiny_run
    corpus = str(root / "{split}.tsv")
    evaluate = ["evaluate", "--checkpoint", str(out), "--data", corpus, "--split", "valid"]
    assert main([*evaluate, "--json", "--by-length", "--beam", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    report = score_translator(
        Translator.from_checkpoint(out), corpus, split="valid", beam=1, by_length=True
    )
    assert printed == json.loads(json.dumps(report.as_dict()))
    assert printed["bleu"] == report.scores.bleu and printed["signature"]
    # the four one-word validation sources all fall in the first bucket
    assert [(b["label"], b["count"]) for b in printed["by_length"]] == [
        ("0-10", 4), ("11-20", 0), ("21-30", 0), ("31-40", 0), ("41+", 0)
    ]  # fmt: skip
    assert printed["by_length"][-1]["bleu"] is None  # an empty bucket's NaN is JSON null
    assert main(evaluate) == 0
    text = capsys.readouterr().out
    assert f"BLEU {report.scores.bleu:.2f}" in text and "exact match" in text
    assert main([*evaluate, "--by-length", "--beam", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  source  11-20 words: BLEU      -  (0 sentences)" in lines
    assert not any("nan" in line for line in lines)


def test_attention_and_curves_write_pictures(tiny_run, tmp_path, capsys):
    from PIL import Image

    _, out, _ = tiny_run
    heatmap = tmp_path / "a.png"
    assert main(["attention", "--checkpoint", str(out), "abc", "--out", str(heatmap)]) == 0
    (translation,) = Translator.from_checkpoint(out).translate(["abc"])
    assert capsys.readouterr().out.splitlines()[0] == f"abc -> {translation.text}"
    assert main(["curves", "--checkpoint", str(out), "--out", str(tmp_path / "c.png")]) == 0
    for picture in (heatmap, tmp_path / "c.png"):
        with Image.open(picture) as image:
            assert image.format == "PNG" and min(image.size) > 100


def test_resume_continues_and_refuses_a_different_setup(tiny_run, capsys):
    _, out, args = tiny_run
    more = [a if a != "4" else "6" for a in args]  # --max-steps 6
    assert main([*more, "--resume"]) == 0
    assert "6 steps" in capsys.readouterr().out
    changed = [*more, "--resume", "--lr", "0.1"]
    # 2 once qkv.training names this refusal with a QkvError; a plain ValueError there
    # is reported as a bug (1), with the same message
    assert main(changed) in (1, 2)
    peak = recipe_for("transformer", "small").lr  # the lr the run was started with
    assert f"train.lr {peak!r} -> 0.1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    """The files a new user gets wrong: empty, binary, truncated, misaligned, misnamed."""
    root = tmp_path_factory.mktemp("mistakes")
    (root / "empty.tsv").write_text("", encoding="utf-8")
    (root / "binary.tsv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00\x00")
    (root / "no_tab.tsv").write_text("hello world\n", encoding="utf-8")
    (root / "one_side.tsv").write_text("hello\t\n", encoding="utf-8")
    (root / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (root / "b.txt").write_text("uno\n", encoding="utf-8")
    (root / "pairs.csv").write_text("a,b\n", encoding="utf-8")
    (root / "folder.tsv").mkdir()
    (root / "not_a_run").mkdir()
    (root / "picture.png").write_bytes(b"not a picture")
    return root


def _mistakes():
    """(argv, words the one-line message must contain); {root} = bad files, {run} = a run,
    {tsv} = the tiny run's corpus pattern."""
    train = ["train", "translation", "--out", "{root}/fresh"]
    tiny = [*train, "--data", "{tsv}"]
    return [
        (["translate", "--checkpoint", "/nonexistent/run", "x"], "does not exist"),
        (["translate", "--checkpoint", "{root}/not_a_run", "x"], "neither a checkpoint"),
        (["translate", "--checkpoint", "{root}/empty.tsv", "x"], "not a directory"),
        (["translate", "--checkpoint", "{run}", "--beam", "0", "abc"], "beam"),
        (["translate", "--checkpoint", "{run}", "   "], "empty"),
        ([*train, "--data", "no-such-corpus"], "unknown corpus"),
        ([*train, "--data", "/nonexistent/file.tsv"], "does not exist"),
        ([*train, "--data", "{root}/empty.tsv"], "holds no lines"),
        ([*train, "--data", "{root}/binary.tsv"], "not valid utf-8"),
        ([*train, "--data", "{root}/no_tab.tsv"], "one tab"),
        ([*train, "--data", "{root}/one_side.tsv"], "target side is empty"),
        ([*train, "--data", "{root}/a.txt,{root}/b.txt"], "differ in length"),
        ([*train, "--data", "{root}/a.txt,{root}/b.txt,{root}/a.txt"], "exactly one comma"),
        ([*train, "--data", "{root}/pairs.csv"], ".tsv"),
        ([*train, "--data", "{root}/folder.tsv"], "is a directory"),
        ([*tiny, "--resume"], "no checkpoint to resume"),
        (["train", "translation", "--data", "{tsv}", "--out", "{run}"], "already holds a run"),
        ([*tiny, "--threads", "0"], "--threads"),
        ([*tiny, "--lr", "-1"], "lr=-1.0"),
        ([*tiny, "--lr", "nan"], "lr=nan"),
        ([*tiny, "--max-steps", "0"], "max_steps"),
        ([*tiny, "--max-minutes", "-5"], "max_minutes"),
        ([*tiny, "--max-tokens", "0"], "max_tokens"),
        ([*tiny, "--label-smoothing", "1.5"], "label_smoothing"),
        ([*tiny, "--vocab-size", "0"], "vocab_size"),
        ([*tiny, "--max-len", "0"], "max_len"),
        ([*tiny, "--dropout", "1.5"], "dropout"),
        ([*tiny, "--attention-dropout", "1.5"], "attention_dropout=1.5"),
        ([*tiny, "--activation-dropout", "-0.1"], "activation_dropout=-0.1"),
        ([*tiny, "--word-dropout", "1"], "word_dropout=1.0"),
        ([*tiny, "--model", "rnn", "--word-dropout", "0.1"], "Transformer dropout site"),
        ([*tiny, "--model", "rnn-attention", "--attention-dropout", "0.1"], "Transformer"),
        ([*tiny, "--size", "huge"], "invalid choice"),
        ([*tiny, "--schedule", "linear"], "invalid choice"),
        ([*tiny, "--schedule", "plateau", "--plateau-factor", "1.5"], "plateau_factor=1.5"),
        ([*tiny, "--plateau-factor", "0"], "plateau_factor=0.0"),
        ([*tiny, "--plateau-patience", "0"], "plateau_patience=0"),
        ([*train, "--data", "{root}/a.txt,{root}/a.txt", "--size", "small-data"], "--valid"),
        ([*tiny, "--max-steps", "ten"], "invalid int value"),
        ([*tiny, "--model", "gpt"], "invalid choice"),
        (["evaluate", "--checkpoint", "{run}", "--data", "{tsv}", "--limit", "0"], "--limit"),
        (["evaluate", "--checkpoint", "{run}", "--data", "nope"], "unknown corpus"),
        (["evaluate", "--checkpoint", "{run}", "--data", "{tsv}", "--split", "dev"], "'dev'"),
        (["attention", "--checkpoint", "{run}", "abc", "--out", "{root}/a.jpg"], ".png"),
        (["caption", "--checkpoint", "{run}", "{root}/picture.png"], "not a captioner"),
        # a translator does not generate: its family's record names the commands that read it
        (
            ["generate", "--checkpoint", "{run}", "--prompt", "a"],
            "'transformer' model, which does not generate text; use qkv translate, qkv "
            "evaluate or qkv explore",
        ),
        (
            ["generate", "--checkpoint", "{run}", "--pretrained", "{root}", "--prompt", "a"],
            "exactly one model",
        ),
        (["curves", "--checkpoint", "/nonexistent/run", "--out", "{root}/c.png"], "nonexistent"),
    ]


@pytest.mark.parametrize(
    "argv, message", _mistakes(), ids=[" ".join(argv[2:] or argv) for argv, _ in _mistakes()]
)
def test_a_user_mistake_is_one_line_naming_it_and_exit_2(
    argv, message, tiny_run, bad_files, capsys
):
    root, run, _ = tiny_run
    names = {"root": str(bad_files), "run": str(run), "tsv": str(root / "{split}.tsv")}
    for name, value in names.items():
        argv = [a.replace("{" + name + "}", value) for a in argv]
    code = _exit_code(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("qkv: error:") and message.lower() in err.lower(), err


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit_info:  # argparse's own mistakes
        return exit_info.code


def test_a_truncated_or_missing_checkpoint_file_is_named(tiny_run, tmp_path, capsys):
    _, run, _ = tiny_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    weights = next(copy.glob("checkpoints/*/model.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["translate", "--checkpoint", str(weights.parent), "abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "corrupt" in err and "model.safetensors" in err
    weights.unlink()
    assert main(["translate", "--checkpoint", str(weights.parent), "abc"]) == 2
    assert "missing" in capsys.readouterr().err


@pytest.mark.parametrize("error", [RuntimeError("boom"), TypeError("boom"), ValueError("boom")])
def test_a_bug_says_so_with_its_traceback_and_exit_1(error, tiny_run, monkeypatch, capsys):
    """A genuine bug deep in the library is not dressed as a user mistake."""
    import qkv.tasks

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(qkv.tasks.Translator, "translate", broken)
    _, run, _ = tiny_run
    assert main(["translate", "--checkpoint", str(run), "abc"]) == 1
    err = capsys.readouterr().err
    assert "this is a bug in qkv, please report it" in err
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert f"{type(error).__name__}: boom" in err


def test_debug_shows_the_traceback_of_a_mistake_too(monkeypatch, capsys):
    argv = ["train", "translation", "--data", "no-such-corpus", "--out", "/tmp/qkv-never"]
    assert main(["--debug", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("qkv: error: unknown corpus 'no-such-corpus'")
    monkeypatch.setenv("QKV_DEBUG", "1")
    assert main(argv) == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("QKV_DEBUG", "0")
    assert main(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


class _Interrupted(Exception):
    """Stands for the trainer's interruption: an exception that carries its exit status."""

    def __init__(self, signal_name: str, exit_code: int):
        super().__init__(f"training interrupted by {signal_name}; resume with --resume")
        self.exit_code = exit_code


@pytest.mark.parametrize(
    "error, code",
    [
        (KeyboardInterrupt(), 130),
        (_Interrupted("SIGTERM", 143), 143),
        (_Interrupted("SIGINT", 130), 130),
        (OSError(errno.ENOSPC, "No space left on device"), 2),
        (PermissionError(errno.EACCES, "Permission denied", "/root/x"), 2),
    ],
)
def test_interruptions_and_the_disk_have_their_exit_status(error, code, monkeypatch, capsys):
    import qkv.cli.curve_commands

    def interrupted(args):
        raise error

    monkeypatch.setattr(qkv.cli.curve_commands, "_curves", interrupted)
    assert main(["curves", "--checkpoint", "x", "--out", "y.png"]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bug" not in err


def test_parser_requires_a_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
