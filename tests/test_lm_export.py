"""`export_hf`: qkv's one LM written as a Hugging Face folder that transformers loads with
the same logits -- gpt as GPT-2, llama as Llama / Mistral / Qwen2, nanochat as NanoChat --
and components no transformers architecture has refused before anything is written."""

from __future__ import annotations

import pytest
import torch

from qkv.errors import InputError
from qkv.models import gpt, llama, nanochat
from qkv.pretrained import load_pretrained
from qkv.pretrained.export import export_hf, hf_architecture

transformers = pytest.importorskip("transformers")

SIZES = dict(d_model=32, num_heads=4, num_layers=3, max_len=64, dropout=0.0)


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter random (norms and biases too), so a mapping mistake shows."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    return model.eval()


CASES = {
    "gpt2": lambda: gpt(97, **SIZES),
    "gpt2-untied-tanh": lambda: gpt(97, **SIZES, tie_embeddings=False, activation="gelu_tanh"),
    "llama": lambda: llama(97, **SIZES, num_kv_heads=2),
    "llama-biased": lambda: llama(97, **SIZES, bias=True, mlp_bias=True),
    "mistral": lambda: llama(97, **SIZES, num_kv_heads=2, window=5),
    "qwen2-some-windows": lambda: llama(97, **SIZES, window=4, window_layers=(0, 1)),
    "qwen2-biases": lambda: llama(97, **SIZES, bias=True, output_bias=False, mlp_bias=False),
    "nanochat": lambda: nanochat(97, **SIZES, num_kv_heads=2),
}
FAMILIES = {
    "gpt2": "gpt2",
    "gpt2-untied-tanh": "gpt2",
    "llama": "llama",
    "llama-biased": "llama",
    "mistral": "mistral",
    "qwen2-some-windows": "qwen2",
    "qwen2-biases": "qwen2",
    "nanochat": "nanochat",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_transformers_loads_the_export_with_identical_logits(case, tmp_path):
    model = _randomize(CASES[case]())
    assert hf_architecture(model.config) == FAMILIES[case]
    folder = export_hf(model, tmp_path / "out")
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()
    assert reference.config.model_type == FAMILIES[case]
    ids = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
        ours = model(ids).logits
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # greedy continuations agree too
        theirs = reference.generate(ids[:1, :6], max_new_tokens=8, do_sample=False)
    from qkv.decoding import sample

    assert torch.equal(sample(model, ids[:1, :6], max_new_tokens=8, temperature=0), theirs)


@pytest.mark.parametrize("case", ["gpt2", "llama", "mistral"])
def test_an_export_loads_back_into_qkv_unchanged(case, tmp_path):
    model = _randomize(CASES[case]())
    folder = export_hf(model, tmp_path / "out")
    from tokenizers import Tokenizer, models

    vocabulary = {f"w{i}": i for i in range(97)}
    Tokenizer(models.WordLevel(vocabulary, unk_token="w0")).save(str(folder / "tokenizer.json"))
    loaded = load_pretrained(folder)
    ids = torch.randint(0, 97, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).logits, model(ids).logits)


@pytest.mark.parametrize(
    "build, named",
    [
        (lambda: gpt(50, **SIZES, qk_norm=True), "qk_norm"),
        (lambda: gpt(50, **SIZES, window=4), "sliding window"),
        (lambda: gpt(50, **SIZES, document_start=1), "packed-document"),
        (lambda: llama(50, **SIZES, logit_softcap=30.0), "logit_softcap"),
        (lambda: gpt(50, **SIZES, norm_first=False), "post-norm"),
        (lambda: gpt(50, **SIZES, positions="rope"), "positions='rope'"),
        (lambda: nanochat(50, **SIZES, window=4), "window=4"),
    ],
)
def test_a_component_without_a_transformers_architecture_is_refused(build, named, tmp_path):
    with pytest.raises(InputError, match=named):
        export_hf(build(), tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written


def test_export_refuses_a_folder_that_holds_files(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not an empty folder"):
        export_hf(gpt(50, **SIZES), tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def _text(tmp_path):
    lines = [f"{'abcab'[i % 5]} line number {i} of the text.\n" for i in range(60)]
    data = tmp_path / "text.txt"
    data.write_text("".join(lines), encoding="utf-8")
    return data


@pytest.mark.parametrize(
    "arch, options, family",
    [
        (None, [], "llama"),  # the defaults: `qkv train lm` with no --arch
        ("gpt", [], "gpt2"),
        ("llama", ["--num-kv-heads", "2"], "llama"),
        ("llama", ["--window", "8", "--window-pattern", "SL"], "qwen2"),
        ("nanochat", [], "nanochat"),
    ],
)
def test_a_trained_run_of_every_architecture_exports_with_identical_logits(
    arch, options, family, tmp_path, capsys
):
    from qkv.cli.main import main
    from qkv.tasks.lm import load_lm

    out = tmp_path / "run"
    code = main(
        ["train", "lm", "--data", str(_text(tmp_path)), "--out", str(out)]
        + (["--arch", arch] if arch else [])
        + ["--context", "32", "--max-steps", "2", "--batch-size", "4", "--threads", "1"]
        + ["--tokenizer", "bytebpe", "--vocab-size", "300"]
        + options
    )
    assert code == 0
    assert (
        main(["export", "--checkpoint", str(out), "--to", "hf", "--out", str(tmp_path / "hf")]) == 0
    )
    assert f"({family})" in capsys.readouterr().out
    loaded = load_lm(out)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "hf", attn_implementation="eager"
    ).eval()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "hf" / "tokenizer.json")
    )
    text = "a line number 7 of the"
    ids = loaded.tokenizer.encode(text)
    assert fast(text, add_special_tokens=False)["input_ids"] == ids
    ids = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.model.eval()(ids).logits, reference(ids).logits, rtol=1e-4, atol=1e-4
        )


def test_export_of_a_run_with_packed_documents_is_one_line(tmp_path, capsys):
    from qkv.cli.main import main

    text = tmp_path / "docs.txt"
    text.write_text("".join(f"document {i} has words.\n\n" for i in range(40)), encoding="utf-8")
    out = tmp_path / "run"
    args = ["train", "lm", "--data", str(text), "--out", str(out), "--pack", "--context", "32"]
    assert main(args + ["--max-steps", "1", "--batch-size", "2", "--threads", "1"]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(out), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "packed-document attention" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()
