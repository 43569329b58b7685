"""Training and using a language model end to end: text, tokenizers, train lm, generate."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv.cli.main import main
from qkv.data import load_tokenizer
from qkv.data.batch import pad_sequences
from qkv.data.text import TextDataset, load_text
from qkv.data.text_tokenizers import ByteBPETokenizer, encode_prompt, train_text_tokenizer
from qkv.decoding import sample
from qkv.errors import DataError, InputError, MissingFileError
from qkv.models import DecoderLM, LMConfig
from qkv.tasks.lm import LMSetup, generate_text, load_lm, train_lm
from qkv.training import TrainConfig

POEM = (
    "Whose woods these are I think I know.\n"
    "His house is in the village though;\n"
    "He will not see me stopping here\n"
    "To watch his woods fill up with snow.\n"
)


def test_a_file_splits_its_last_five_percent_of_lines_off_for_validation(tmp_path):
    lines = [f"line {i}\n" for i in range(40)]
    path = tmp_path / "t.txt"
    path.write_text("".join(lines), encoding="utf-8")
    corpus = load_text(str(path))
    assert corpus.train == "".join(lines[:38]) and corpus.valid == "".join(lines[38:])
    short = tmp_path / "short.txt"
    short.write_text(POEM, encoding="utf-8")
    assert load_text(str(short)).valid == ""  # fewer than 20 lines: no validation


def test_bad_text_files_are_clear_errors(tmp_path):
    with pytest.raises(MissingFileError, match="neither a built-in corpus"):
        load_text(str(tmp_path / "missing.txt"))
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"ok\xff\xfe")
    with pytest.raises(DataError, match="not UTF-8"):
        load_text(str(binary))
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no text"):
        load_text(str(blank))


def test_windows_predict_every_token_but_the_first_exactly_once():
    ids = torch.arange(4, 4 + 23)
    data = TextDataset(ids, context=5)
    batch = data.collate(range(len(data)))
    assert batch.source.shape == (len(data), 0)
    targets = batch.target_output[batch.target_output != 0]
    assert sorted(targets.tolist()) == ids[1:].tolist()
    # each window's input is the tokens just before its targets
    assert torch.equal(batch.target_input[0], ids[:5]) and torch.equal(
        batch.target_output[0], ids[1:6]
    )
    with pytest.raises(DataError, match="reserved for padding"):
        TextDataset(torch.tensor([5, 0, 6]), context=2)


def test_byte_level_bpe_round_trips_any_text_and_saves(tmp_path):
    tokenizer = train_text_tokenizer("bytebpe", POEM * 3, vocab_size=300)
    text = "Snow — 雪 ❄\n\ttabs, and\nnewlines stay.  "
    assert 3 not in tokenizer.encode(text)  # never an unknown token
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert len(tokenizer.encode("woods")) < len("woods")  # merges were learned
    tokenizer.save(tmp_path / "tok.json")
    loaded = load_tokenizer(tmp_path / "tok.json")
    assert isinstance(loaded, ByteBPETokenizer) and loaded.encode(text) == tokenizer.encode(text)
    with pytest.raises(InputError, match="at least 260"):
        ByteBPETokenizer.train([POEM], vocab_size=100)


def test_prompts_with_characters_a_char_tokenizer_never_saw_are_refused():
    tokenizer = train_text_tokenizer("char", POEM)
    assert tokenizer.decode(encode_prompt(tokenizer, "his woods")) == "his woods"
    with pytest.raises(InputError, match=r"never saw in training: 'Qz'.*bytebpe"):
        encode_prompt(tokenizer, "his Quiz")
    with pytest.raises(InputError, match="prompt is empty"):
        encode_prompt(tokenizer, "")


def short_run(tmp_path, name, *, max_steps, resume=False):
    path = tmp_path / "poem.txt"
    path.write_text(POEM, encoding="utf-8")
    setup = LMSetup(data=str(path), size="small", context=48, dropout=0.1)
    config = TrainConfig(
        lr=3e-3,
        warmup_steps=2,
        label_smoothing=0.0,
        max_tokens=2 * 49,  # two windows per step, two steps per epoch
        epochs=None,
        max_steps=max_steps,
        validate_every=0,
        log_every=1,
        device="cpu",
    )
    return train_lm(setup, config, tmp_path / name, resume=resume)


def test_a_tiny_model_memorises_a_short_text_in_seconds_and_generates_it_back():
    tokenizer = train_text_tokenizer("char", POEM)
    ids = torch.tensor([tokenizer.encode(POEM)])
    torch.manual_seed(0)
    config = LMConfig(
        tokenizer.vocab_size,
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=128,
        max_len=160,
        dropout=0.0,
    )
    model = DecoderLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = model.loss(ids)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    prompt = torch.tensor([tokenizer.encode("Whose")])
    out = sample(model, prompt, max_new_tokens=ids.shape[1] - 5, temperature=0)
    assert tokenizer.decode(out[0].tolist()) == POEM


def test_train_lm_resumes_exactly(tmp_path):
    # stop at step 3, mid-epoch (two steps per epoch), with dropout drawing random numbers
    short_run(tmp_path, "whole", max_steps=6)
    short_run(tmp_path, "cut", max_steps=3)
    short_run(tmp_path, "cut", max_steps=6, resume=True)
    whole, cut = load_lm(tmp_path / "whole").model, load_lm(tmp_path / "cut").model
    for (name, a), b in zip(whole.state_dict().items(), cut.state_dict().values()):
        assert torch.equal(a, b), name

    def losses(run):
        lines = (tmp_path / run / "log.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["event"] == "train"]

    assert losses("cut") == losses("whole")


def test_cli_trains_and_streams_the_same_text_the_library_generates(tmp_path, capsys):
    lines = [f"{'abcab'[i % 5]} line number {i} of the text.\n" for i in range(30)]
    data = tmp_path / "text.txt"
    data.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "run"
    code = main(
        ["train", "lm", "--data", str(data), "--out", str(out), "--context", "32"]
        + ["--max-steps", "3", "--batch-size", "4", "--threads", "1", "--device", "cpu"]
    )
    assert code == 0
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["event"] == "valid"]
    assert valid and valid[-1]["valid_ppl"] == pytest.approx(2.718281828 ** valid[-1]["valid_loss"])
    capsys.readouterr()
    args = ["generate", "--checkpoint", str(out), "--prompt", "a line", "--max-new-tokens", "20"]
    assert main(args + ["--seed", "3"]) == 0
    streamed = capsys.readouterr().out
    (expected,) = generate_text(load_lm(out), "a line", max_new_tokens=20, seed=3)
    assert streamed == "a line" + expected + "\n"
    assert main(args + ["--seed", "3", "--no-cache"]) == 0
    assert capsys.readouterr().out == streamed
    assert main(args + ["--prompt", "a line ~"]) == 2  # '~' is not in the text
    assert "never saw in training: '~'" in capsys.readouterr().err


@settings(max_examples=40, deadline=None)
@given(
    length=st.integers(2, 60),
    context=st.integers(1, 9),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=6),
)
def test_a_batch_of_windows_is_the_windows_padded(length, context, picks):
    data = TextDataset(torch.arange(4, 4 + length), context=context)
    indices = [pick % len(data) for pick in picks]
    expected = pad_sequences([data[i] for i in indices])
    batch = data.collate(indices)
    assert torch.equal(batch.target, expected) and batch.index.tolist() == indices


def test_lm_options_reach_the_train_config():
    from qkv.cli.main import build_parser
    from qkv.cli.options import given_train_values
    from qkv.tasks.presets import preset_for
    from qkv.tasks.task import train_config

    parse = build_parser().parse_args
    preset = preset_for("lm", "small")

    def config_of(argv):
        return train_config(preset, given_train_values(parse(argv)))

    # nothing given: every trainer value the preset sets reaches the run's config
    default = config_of(["train", "lm", "--out", "x", "--max-steps", "5"])
    assert preset.train
    for name, value in preset.train.items():
        assert getattr(default, name) == value, name
    given = config_of(
        ["train", "lm", "--out", "x", "--max-steps", "5", "--eval-batches", "0"]
        + ["--weight-decay", "0", "--beta2", "0.95", "--schedule", "inverse_sqrt"]
    )
    beta1 = default.betas[0]
    assert (given.eval_batches, given.weight_decay, given.betas) == (0, 0.0, (beta1, 0.95))
    assert given.schedule == "inverse_sqrt"
    with pytest.raises(InputError, match="weight_decay"):
        config_of(["train", "lm", "--out", "x", "--weight-decay", "2"])
