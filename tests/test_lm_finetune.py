"""Fine-tuning with `qkv train lm --init-from`: a tiny random-weight GPT-2 folder, a tiny Llama
folder (both made with transformers, their tokenizers with ``tokenizers``) and a qkv run
train on a user's text through the CLI, their validation loss falls below the start's own,
the run resumes exactly and generates; what cannot start a run is one line, exit 2."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from qkv.cli.main import main
from qkv.data import load_tokenizer
from qkv.data.batch import NO_PAD_ID
from qkv.data.text import TextDataset, load_text
from qkv.errors import DataError
from qkv.pretrained import FolderTokenizer, load_pretrained
from qkv.tasks.lm import context_loss, encode_documents, encode_text, load_lm
from qkv.training.lock import RunLock
from qkv.training.loss import sequence_loss

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

VOCAB = 300  # the model's rows; the tokenizers below hold at most this many tokens
POSITIONS = 64
CONTEXT = 32
THINGS = ["the heaven", "the earth", "the waters", "the light", "the darkness", "the sea"]
VERBS = ["made", "saw", "divided", "called", "blessed"]


def write_text(path, lines=400, *, paragraphs=False):
    """A text with structure a model can learn quickly (its last 5% of lines: validation)."""
    text = []
    for i in range(lines):
        a, b = THINGS[i % len(THINGS)], THINGS[(i * 7 + 3) % len(THINGS)]
        text.append(f"And God {VERBS[i % len(VERBS)]} {a}, and {b} was good.\n")
        if paragraphs and i % 4 == 3:
            text.append("\n")
    path.write_text("".join(text), encoding="utf-8")
    return path


def save_tokenizer(folder, text, *, bos=False):
    """A byte-level BPE ``tokenizer.json``; with ``bos``, <s> (id 0) and </s> (id 1) first
    and a post-processor that opens every text with <s>, as Llama's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "</s>"] if bos else [],
        show_progress=False,
    )
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer)
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 0)]
        )
    tokenizer.save(str(folder / "tokenizer.json"))
    assert tokenizer.get_vocab_size() <= VOCAB


def gpt2_folder(tmp_path, text, positions=POSITIONS):
    folder = tmp_path / "gpt2"
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=positions,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=None,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)
    save_tokenizer(folder, text)
    return folder


def llama_folder(tmp_path, text):
    folder = tmp_path / "llama"
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=POSITIONS,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    save_tokenizer(folder, text, bos=True)
    return folder


FOLDERS = {"gpt2": gpt2_folder, "llama": llama_folder}


def train(data, out, *options):
    """`qkv train lm` in-process, a tiny budget; the exit status."""
    return main(
        ["train", "lm", "--data", str(data), "--out", str(out), "--device", "cpu"]
        + ["--batch-size", "8", "--validate-every", "10", "--log-every", "1"]
        + [str(option) for option in options]
    )


def train_losses(run):
    lines = (run / "log.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["event"] == "train"]


@pytest.mark.parametrize("family", sorted(FOLDERS))
def test_a_folder_fine_tunes_below_its_own_loss_and_the_run_generates(tmp_path, family, capsys):
    data = write_text(tmp_path / "my.txt")
    folder = FOLDERS[family](tmp_path, data.read_text())
    start = load_pretrained(folder)
    valid = encode_text(start.tokenizer, load_text(str(data)).valid)
    before = context_loss(start.model, valid, context=CONTEXT)

    run = tmp_path / "run"
    options = ["--init-from", folder, "--context", CONTEXT, "--lr", 3e-3, "--max-steps", 30]
    assert train(data, run, *options) == 0
    out = capsys.readouterr().out
    assert f"init from {folder}: a {family} model, 2 layers x 32 wide" in out
    assert "context 32, dropout the start's" in out
    tuned = load_lm(run)
    after = context_loss(tuned.model, valid, context=CONTEXT)
    assert after < before - 1.0, (before, after)
    # the run's model is the folder's network; its checkpoint keeps the folder's tokenizer
    assert tuned.model.config == start.model.config
    assert tuned.tokenizer.encode("And God saw the sea") == start.tokenizer.encode(
        "And God saw the sea"
    )
    assert tuned.eos_ids == start.eos_ids == ((1,) if family == "llama" else ())
    assert tuned.setup.arch == ("gpt" if family == "gpt2" else "llama")
    if (
        family == "llama"
    ):  # the post-processor opens the text with <s>, as the folder's model read it
        assert valid[0].item() == 0 and (valid[1:] != 0).all()

    generate = ["generate", "--checkpoint", str(run), "--prompt", "And God", "--seed", "1"]
    assert main([*generate, "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out.startswith("And God")

    # and back to transformers: the fine-tuned model and the folder's tokenizer
    exported = tmp_path / "exported"
    assert main(["export", "--checkpoint", str(run), "--to", "hf", "--out", str(exported)]) == 0
    reference = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    with torch.no_grad():
        expected = reference(valid[None, :CONTEXT]).logits
    torch.testing.assert_close(
        tuned.model(valid[None, :CONTEXT]).logits, expected, rtol=0, atol=1e-4
    )
    text = "And God saw the sea"
    assert FolderTokenizer(exported / "tokenizer.json").encode(text) == start.tokenizer.encode(text)


@pytest.mark.parametrize("positions, context", [(POSITIONS, POSITIONS), (300, 256)])
def test_the_default_context_is_the_folders_positions_at_most_256(
    tmp_path, capsys, positions, context
):
    data = write_text(tmp_path / "my.txt")
    folder = gpt2_folder(tmp_path, data.read_text(), positions)
    assert train(data, tmp_path / "run", "--init-from", folder, "--max-steps", 1) == 0
    assert f"context {context}, dropout the start's" in capsys.readouterr().out
    assert load_lm(tmp_path / "run").setup.context == context


def test_a_fine_tuning_run_resumes_exactly_and_only_alone(tmp_path, capsys):
    data = write_text(tmp_path / "my.txt")
    folder = gpt2_folder(tmp_path, data.read_text())
    # dropout given, so the resumed run must also restore the random state it draws from; a
    # schedule whose lr changes at every step but does not depend on the run's length
    options = ["--init-from", folder, "--context", CONTEXT, "--dropout", 0.1, "--seed", 3]
    options += ["--validate-every", 2, "--schedule", "inverse_sqrt", "--warmup-steps", 2]
    assert train(data, tmp_path / "whole", *options, "--max-steps", 6) == 0
    assert train(data, tmp_path / "cut", *options, "--max-steps", 3) == 0
    with RunLock(tmp_path / "cut"):  # another process training into the run: refused
        assert train(data, tmp_path / "cut", *options, "--max-steps", 6, "--resume") == 2
    assert "in use by another training run" in capsys.readouterr().err
    assert train(data, tmp_path / "cut", *options, "--max-steps", 6, "--resume") == 0
    whole, cut = load_lm(tmp_path / "whole").model, load_lm(tmp_path / "cut").model
    assert whole.config.dropout == 0.1
    for (name, a), b in zip(whole.state_dict().items(), cut.state_dict().values()):
        assert torch.equal(a, b), name
    assert train_losses(tmp_path / "cut") == train_losses(tmp_path / "whole")


def test_ctrl_c_stops_a_fine_tuning_run_with_a_checkpoint_that_resumes_exactly(tmp_path):
    data = write_text(tmp_path / "my.txt")
    folder = gpt2_folder(tmp_path, data.read_text())
    cut = tmp_path / "cut"
    # an lr schedule that does not depend on the run's length, so a run to the step where
    # the interrupted one stopped, and three more, is the reference
    options = ["--init-from", folder, "--context", CONTEXT, "--seed", 5, "--threads", 1]
    options += ["--schedule", "inverse_sqrt", "--warmup-steps", 2, "--lr", 1e-3]
    command = [sys.executable, "-m", "qkv.cli.main", "train", "lm", "--data", data]
    command += ["--out", cut, "--batch-size", 8, "--log-every", 1, "--validate-every", 1000]
    process = subprocess.Popen(
        [str(part) for part in command + options + ["--max-steps", 100_000]],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not train_losses_so_far(cut) or train_losses_so_far(cut)[-1][0] < 3:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the run did not reach step 3 in 120 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 130
    stopped = json.loads((cut / "last.json").read_text())["step"]
    end = json.loads((cut / "log.jsonl").read_text().splitlines()[-1])
    assert stopped >= 3 and end["reason"] == "interrupted" and end["step"] == stopped
    assert "resume" in process.stderr.read().strip().splitlines()[-1]

    target = ["--max-steps", stopped + 3, "--validate-every", 1000]
    assert train(data, cut, *options, *target, "--resume") == 0
    assert train(data, tmp_path / "whole", *options, *target) == 0
    whole, resumed = load_lm(tmp_path / "whole").model, load_lm(cut).model
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert train_losses(cut)[-3:] == train_losses(tmp_path / "whole")[-3:]


def train_losses_so_far(run):
    log = run / "log.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(r["step"], r["loss"]) for r in map(json.loads, lines[:-1]) if r["event"] == "train"]


def test_a_qkv_run_fine_tunes_with_its_model_and_tokenizer(tmp_path, capsys):
    first = write_text(tmp_path / "first.txt", 60)
    data = tmp_path / "second.txt"  # another text, in the same alphabet
    data.write_text(
        "".join(f"the sea {i % 5} was made, and the light was divided.\n" for i in range(300))
    )
    base = tmp_path / "base"
    assert train(first, base, "--context", CONTEXT, "--max-steps", 5) == 0
    start = load_lm(base)
    valid = encode_text(start.tokenizer, load_text(str(data)).valid)
    before = context_loss(start.model, valid, context=CONTEXT)

    run = tmp_path / "run"
    options = ["--init-from", base, "--tokenizer", "char", "--lr", 3e-3, "--max-steps", 30]
    assert train(data, run, *options) == 0
    sizes = f"{start.model.config.num_layers} layers x {start.model.config.d_model} wide"
    assert f"init from {base}: a qkv run's model, {sizes}" in capsys.readouterr().out
    tuned = load_lm(run)
    assert tuned.model.config == start.model.config
    assert tuned.setup.context == CONTEXT  # the run's context (its positions: 32)
    assert tuned.tokenizer.alphabet == start.tokenizer.alphabet
    assert context_loss(tuned.model, valid, context=CONTEXT) < before - 0.5


def test_packed_documents_open_with_the_folders_bos(tmp_path):
    data = write_text(tmp_path / "my.txt", paragraphs=True)
    folder = llama_folder(tmp_path, data.read_text())
    run = tmp_path / "run"
    options = ["--init-from", folder, "--context", CONTEXT, "--pack", "--max-steps", 2]
    assert train(data, run, *options) == 0
    tuned = load_lm(run)
    assert tuned.model.config.document_start == 0
    # one <s> per document, never two: the post-processor's is left out when packing
    ids = encode_documents(tuned.tokenizer, ["And God saw.\n", "the sea\n"], bos=0)
    assert ids.tolist().count(0) == 2 and ids[0] == 0
    assert main(["generate", "--checkpoint", str(run), "--prompt", "And", "--seed", "1"]) == 0
    # a run started from this one packs with the folder's BOS too (not qkv's <s>, id 1)
    again = tmp_path / "again"
    assert train(data, again, "--init-from", run, "--pack", "--max-steps", 1) == 0
    assert load_lm(again).model.config.document_start == 0 and load_lm(again).eos_ids == (1,)


def refused(capsys, *argv):
    """The one line of a refused command (exit status 2)."""
    capsys.readouterr()  # what came before (transformers' progress bars)
    assert main(list(map(str, argv))) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv: error: "), captured.err
    return lines[0]


def test_what_cannot_start_a_fine_tuning_run_is_one_line(tmp_path, capsys):
    data = write_text(tmp_path / "my.txt")
    gpt2 = gpt2_folder(tmp_path, data.read_text())
    bert = tmp_path / "bert"
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
    )
    transformers.BertModel(config).save_pretrained(bert)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "readme.txt").write_text("not a model")

    def refused_run(*options):
        line = refused(capsys, "train", "lm", "--data", data, "--out", tmp_path / "run", *options)
        assert not (tmp_path / "run").exists()  # nothing written
        return line

    line = refused_run("--init-from", notes)
    assert "holds no model" in line and "readme.txt" in line and "gpt2, llama" in line
    line = refused_run("--init-from", tmp_path / "nowhere")
    assert "is not a folder" in line
    line = refused_run("--init-from", bert)
    assert "model_type='bert'" in line and "encoder" in line and "gpt2, llama" in line
    line = refused_run("--init-from", gpt2, "--arch", "nanochat")
    assert "arch='nanochat' cannot apply" in line and line.endswith("(set by --arch nanochat)")
    line = refused_run("--init-from", gpt2, "--size", "medium", "--window", 8)
    assert "size='medium', window=8 cannot apply" in line
    line = refused_run("--init-from", gpt2, "--context", 100)
    assert f"at most {POSITIONS}" in line and "(set by --context 100)" in line
    line = refused_run("--init-from", gpt2, "--pack")
    assert "no bos_token_id" in line and "(set by --pack)" in line
    tuned = tmp_path / "tuned"  # a run fine-tuned from that folder has no BOS either
    assert train(data, tuned, "--init-from", gpt2, "--max-steps", 1) == 0
    line = refused_run("--init-from", tuned, "--pack")
    assert "no bos_token_id" in line
    # the architecture's own name is not a conflict
    assert train(data, tmp_path / "ok", "--init-from", gpt2, "--arch", "gpt", "--max-steps", 1) == 0


def test_a_stream_whose_every_id_is_a_token_pads_outside_the_vocabulary():
    # id 0 is a word here (a folder's vocabulary): it must be trained on, only padding skipped
    ids = torch.tensor([0, 5, 0, 7, 2, 0, 9, 0, 4, 1, 0])  # 11 tokens: windows of 5, 5, 3
    data = TextDataset(ids, context=4, pad_id=NO_PAD_ID)
    batch = data.collate([0, 1, 2])
    assert batch.pad_id == NO_PAD_ID and batch.to("cpu").pad_id == NO_PAD_ID
    assert batch.target[2].tolist() == [4, 1, 0, NO_PAD_ID, NO_PAD_ID]
    assert batch.target_input[2].tolist() == [4, 1, 0, 0]  # the model reads pads as id 0
    assert batch.num_target_tokens == 4 + 4 + 2
    logits = torch.randn(3, 4, 10)
    loss_sum, count = sequence_loss(logits, batch.target_output, pad_id=batch.pad_id)
    keep = batch.target_output != NO_PAD_ID
    expected = F.cross_entropy(logits[keep], batch.target_output[keep], reduction="sum")
    torch.testing.assert_close(loss_sum, expected)
    assert count == 10
    with pytest.raises(DataError, match="id 0, reserved for padding"):
        TextDataset(ids, context=4)  # qkv's own tokenizers keep id 0 for padding


def test_a_folder_tokenizer_is_saved_and_read_back_whole(tmp_path):
    data = write_text(tmp_path / "my.txt", 40)
    save_tokenizer(tmp_path, data.read_text(), bos=True)
    tokenizer = FolderTokenizer(tmp_path / "tokenizer.json")
    tokenizer.save(tmp_path / "saved.json")
    again = load_tokenizer(tmp_path / "saved.json")
    assert type(again) is FolderTokenizer and again.add_special_tokens
    text = "And God saw the sea, and it was good!\n"
    assert again.encode(text) == tokenizer.encode(text) and again.encode(text)[0] == 0
    assert again.encode(text, add_special_tokens=False) == tokenizer.encode(text)[1:]
    assert again.decode(tokenizer.encode(text)) == "<s>" + text
