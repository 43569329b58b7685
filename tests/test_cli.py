"""The `qkv` command end to end on a tiny corpus: train, translate, evaluate, attention,
resume; --help teaches; errors are one line and a non-zero exit."""

import json

import pytest

from qkv.cli.main import build_parser, main

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


def test_translate_evaluate_and_attention_work_on_the_checkpoint(tiny_run, capsys, tmp_path):
    root, out, _ = tiny_run
    assert main(["translate", "--checkpoint", str(out), "abc", "abd", "--beam", "2"]) == 0
    assert capsys.readouterr().out.count("\n") == 2  # one line per sentence (maybe empty: 4 steps)
    evaluate = ["evaluate", "--checkpoint", str(out), "--data", str(root / "{split}.tsv")]
    evaluate += ["--split", "valid", "--json"]
    assert main(evaluate) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"bleu", "chrf", "exact_match", "signature"} <= set(scores)
    assert main([*evaluate, "--by-length", "--beam", "1"]) == 0
    by_length = json.loads(capsys.readouterr().out)["by_length"]
    assert [b["label"] for b in by_length] == ["0-10", "11-20", "21-30", "31-40", "41+"]
    assert by_length[0]["count"] > 0 and by_length[-1] == {"label": "41+", "count": 0, "bleu": None}
    assert (
        main(["attention", "--checkpoint", str(out), "abc", "--out", str(tmp_path / "a.png")]) == 0
    )
    assert (tmp_path / "a.png").stat().st_size > 1000
    assert main(["curves", "--checkpoint", str(out), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_resume_continues_and_refuses_a_different_setup(tiny_run, capsys):
    _, out, args = tiny_run
    more = [a if a != "4" else "6" for a in args]  # --max-steps 6
    assert main([*more, "--resume"]) == 0
    assert "6 steps" in capsys.readouterr().out
    changed = [*more, "--resume", "--lr", "0.1"]
    assert main(changed) == 2
    assert "lr" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["translate", "--checkpoint", "/nonexistent/run", "x"], "does not exist"),
        (
            ["train", "translation", "--data", "no-such-corpus", "--out", "/tmp/qkv-never"],
            "unknown corpus",
        ),
        (
            ["train", "translation", "--data", "/nonexistent/file.tsv", "--out", "/tmp/qkv-never"],
            "does not exist",
        ),
    ],
)
def test_errors_are_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("qkv: error:") and message.lower() in err.lower()
    assert len(err.splitlines()) == 1


def test_parser_requires_a_command():
    with pytest.raises(SystemExit):
        build_parser().parse_args([])
