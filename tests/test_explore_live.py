"""Live pages' data (no browser): the packed weights are the model's, bit for bit; tied
weights are stored once; the tokenizer's table is the tokenizer's; a model over the size
limit gets one line and a static page; families without a live pass are refused early;
``qkv explore --live`` writes a live page."""

import base64
import json
import re

import numpy as np
import pytest
import torch

from qkv.data import BPETokenizer, CharTokenizer
from qkv.data.word_tokenizer import WordTokenizer
from qkv.errors import InputError
from qkv.explore import add_live, explore, live_entry, render_html
from qkv.explore.live import pack_tensors, tokenizer_spec, weight_megabytes
from qkv.models import Transformer, TransformerConfig

from .test_explore import SENTENCES, tiny_captioner, tiny_tokenizer, tiny_transformer


def unpack(entry: dict) -> dict[str, np.ndarray]:
    numbers = np.frombuffer(base64.b64decode(entry["weights"]), dtype="<f4")
    return {
        name: numbers[offset : offset + int(np.prod(shape))].reshape(shape)
        for name, (offset, shape) in entry["tensors"].items()
    }


def test_the_packed_weights_are_the_state_dict_and_tied_ones_are_stored_once():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size)  # tie_output: output.weight is the embedding
    entry = live_entry(model, tokenizer)
    unpacked = unpack(entry)
    state = model.state_dict()
    assert set(unpacked) == set(state)
    for name, tensor in state.items():
        assert np.array_equal(unpacked[name], tensor.numpy()), name
    tensors = entry["tensors"]
    assert tensors["output.weight"][0] == tensors["target_embedding.weight"][0]
    by_offset = {offset: shape for offset, shape in tensors.values()}
    assert len(by_offset) == len(tensors) - 1  # only the tied pair shares its numbers
    stored = len(base64.b64decode(entry["weights"])) // 4
    assert stored == sum(int(np.prod(shape)) for shape in by_offset.values())
    assert weight_megabytes(model) == pytest.approx(stored * 4 / 2**20)
    assert entry["family"] == "transformer" and entry["config"]["heads"] == 4


def test_pack_tensors_keeps_float32_exactly_and_skips_integer_buffers():
    tensors = {"a": torch.randn(3, 2), "count": torch.tensor([3]), "b": torch.randn(4).double()}
    index, data = pack_tensors(tensors)
    assert set(index) == {"a", "b"}
    numbers = np.frombuffer(base64.b64decode(data), dtype="<f4")
    assert np.array_equal(numbers[:6].reshape(3, 2), tensors["a"].numpy())
    assert np.array_equal(numbers[6:], tensors["b"].float().numpy())


def test_the_tokenizer_table_is_the_tokenizers():
    char = CharTokenizer.train(["abc d"])
    assert tokenizer_spec(char) == {
        "kind": "char",
        "alphabet": [" ", "a", "b", "c", "d"],
        "specials": ["<pad>", "<s>", "</s>", "<unk>"],
    }
    bpe = BPETokenizer.train(["the cat sat on the mat"] * 5, vocab_size=40)
    spec = tokenizer_spec(bpe)
    assert spec["kind"] == "bpe" and spec["vocab"]["<unk>"] == 3 and spec["merges"]
    words = WordTokenizer.train(["the cat sat", "the mat"])
    assert tokenizer_spec(words) == {
        "kind": "words",
        "words": ["the", "cat", "mat", "sat"],
        "specials": ["<pad>", "<s>", "</s>", "<unk>"],
    }
    with pytest.raises(InputError, match="char, words, bpe and bytebpe"):
        tokenizer_spec(object())


def test_a_model_over_the_limit_gets_one_line_and_a_static_page():
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size)
    data = explore(model, SENTENCES[:1], tokenizer=tokenizer, max_len=4)
    limit = weight_megabytes(model) / 2
    line = add_live(data, model, tokenizer, max_mb=limit)
    assert "live-max-mb" in line and "static page" in line and "\n" not in line
    assert "live" not in data
    assert "qkvLive" not in render_html(data)  # the static page's script only
    assert add_live(data, model, tokenizer, max_mb=limit * 4) is None
    assert "window.qkvLive" in render_html(data) and "LIVE.transformer" in render_html(data)
    with pytest.raises(InputError, match="positive"):
        add_live(data, model, tokenizer, max_mb=0)


def test_families_without_a_live_pass_are_refused():
    model, vocab = tiny_captioner()
    with pytest.raises(InputError, match="no live forward pass"):
        live_entry(model, vocab)
    tokenizer = tiny_tokenizer()
    model = tiny_transformer(tokenizer.vocab_size, layers=1, heads=2)
    data = explore(model, SENTENCES[:1], tokenizer=tokenizer, max_len=2)
    for family in ("captioner", "../page"):
        with pytest.raises(InputError, match="no live forward pass"):
            render_html({**data, "live": {**live_entry(model, tokenizer), "family": family}})


def test_the_dates_sized_transformer_page_stays_under_5_mb():
    """The demo's model (TransformerConfig.small on the dates alphabet: about 60 characters,
    max_len 256): its live page, weights and all, is far below 5 MB."""
    tokenizer = CharTokenizer.train(["Tuesday, March 3, 1998 3/4/01 the 3rd of July 14th 1969-"])
    vocab = 64
    model = Transformer(TransformerConfig.small(vocab))
    data = explore(model, ["3/4/01"], tokenizer=tokenizer, max_len=4)
    assert add_live(data, model, tokenizer) is None
    size = len(render_html(data).encode("utf-8"))
    assert size < 5 * 2**20, size


def test_qkv_explore_live_writes_a_live_page_and_says_so(tmp_path, capsys):
    from qkv.cli.main import main
    from qkv.training import save_checkpoint

    tokenizer = tiny_tokenizer()
    run = tmp_path / "translator"
    model = tiny_transformer(tokenizer.vocab_size, layers=1, heads=2)
    save_checkpoint(run, model, step=1, tokenizers={"tokenizer": tokenizer})
    out = tmp_path / "live.html"
    assert main(["explore", "--checkpoint", str(run), "the fox", "--out", str(out), "--live"]) == 0
    assert "MB of weights embedded" in capsys.readouterr().out
    found = re.search(r'id="qkv-data">(.*?)</script>', out.read_text(encoding="utf-8"), re.S)
    assert json.loads(found.group(1))["live"]["family"] == "transformer"
    args = ["explore", "--checkpoint", str(run), "a", "--out", str(out), "--live"]
    assert main([*args, "--live-max-mb", "0.001"]) == 0
    assert "static page" in capsys.readouterr().out
    assert "qkvLive" not in out.read_text(encoding="utf-8")
    assert main([*args, "--live-max-mb", "-1"]) == 2
    assert "--live-max-mb" in capsys.readouterr().err


def test_qkv_explore_live_refuses_a_captioner_before_any_work(tmp_path, capsys):
    from qkv.cli.main import main
    from qkv.training import save_checkpoint

    model, vocab = tiny_captioner()
    save_checkpoint(tmp_path / "captioner", model, step=1, tokenizers={"vocab": vocab})
    args = ["explore", "--checkpoint", str(tmp_path / "captioner"), "x.png", "--out"]
    assert main([*args, str(tmp_path / "x.html"), "--live"]) == 2
    assert "--live is for" in capsys.readouterr().err


def test_the_demo_writes_a_live_page_of_its_examples(tmp_path):
    from qkv.tasks import Translator
    from qkv.tasks.demo import EXAMPLES, write_live_page
    from qkv.training import save_checkpoint

    tokenizer = CharTokenizer.train(EXAMPLES)
    model = tiny_transformer(tokenizer.vocab_size, layers=1, heads=2)
    save_checkpoint(tmp_path / "run", model, step=1, tokenizers={"tokenizer": tokenizer})
    translator = Translator.from_checkpoint(tmp_path / "run")
    page = write_live_page(translator, tmp_path / "attention" / "explore-live.html")
    found = re.search(r'id="qkv-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
    data = json.loads(found.group(1))
    assert [entry["name"] for entry in data["inputs"]] == EXAMPLES
    assert data["live"]["family"] == "transformer"


@pytest.mark.parametrize("family", ["lm", "rnn-attention"])
def test_qkv_explore_live_writes_a_language_model_and_an_rnn_page(tmp_path, capsys, family):
    from qkv.cli.main import main
    from qkv.models import DecoderLM, LMConfig, RNNConfig, RNNTranslator
    from qkv.training import save_checkpoint

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    if family == "lm":
        config = LMConfig(tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=1)
        model = DecoderLM(config)
    else:
        model = RNNTranslator(RNNConfig(tokenizer.vocab_size, embedding_dim=8, hidden_dim=8))
    save_checkpoint(tmp_path / "run", model, step=1, tokenizers={"tokenizer": tokenizer})
    out = tmp_path / "live.html"
    args = ["explore", "--checkpoint", str(tmp_path / "run"), "the fox", "--live"]
    assert main([*args, "--out", str(out)]) == 0
    assert "MB of weights embedded" in capsys.readouterr().out
    found = re.search(r'id="qkv-data">(.*?)</script>', out.read_text(encoding="utf-8"), re.S)
    live = json.loads(found.group(1))["live"]
    assert live["family"] == ("lm" if family == "lm" else "rnn")
    assert set(live["tensors"]) == set(model.state_dict())


def test_the_webassembly_module_is_well_formed():
    """The bytes of qkv/explore/wasm.py's module: header, sections in the order the format
    requires, both exports; LEB128 as the format writes it.  (The browser tests run it.)"""
    from qkv.explore.wasm import _signed, _unsigned, matmat_base64, matmat_module

    assert (
        _unsigned(0) == b"\x00"
        and _unsigned(127) == b"\x7f"
        and _unsigned(624485) == b"\xe5\x8e\x26"
    )
    assert _signed(-4) == b"\x7c" and _signed(63) == b"\x3f" and _signed(64) == b"\xc0\x00"
    module = matmat_module()
    assert module[:8] == b"\0asm\x01\0\0\0"
    sections, at = [], 8
    while at < len(module):
        number, at = module[at], at + 1
        size = shift = 0
        while True:
            byte, at = module[at], at + 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        sections.append(number)
        at += size
    assert at == len(module) and sections == [1, 3, 5, 7, 10]
    assert b"matmat" in module and b"memory" in module
    assert base64.b64decode(matmat_base64()) == module


def test_every_language_model_architecture_runs_live_and_a_length_dependent_one_does_not():
    """The live script runs every architecture's components (the browser tests compare each
    with PyTorch); RoPE's frequencies come computed, with the model's theta and scaling;
    a model whose frequencies change with the length read, or that restarts positions at
    each document, is refused by name (the command then writes a static page), never run
    wrongly in the browser."""
    from qkv.errors import InputError
    from qkv.explore.language import LanguageModelAdapter
    from qkv.functional.rope_scaling import RopeScaling
    from qkv.models import gpt, llama, nanochat

    sizes = dict(d_model=16, num_heads=2, num_layers=2, max_len=16)
    adapter = LanguageModelAdapter()
    config = adapter.live_config(gpt(30, **sizes))
    assert config["norm"] == "layer" and config["rope_frequencies"] is None
    config = adapter.live_config(llama(30, **sizes, rope_base=500000.0))
    assert config["norm"] == "rms" and len(config["rope_frequencies"]) == 4
    assert config["rope_frequencies"][1] == pytest.approx(500000.0 ** (-2 / 8))
    config = adapter.live_config(nanochat(30, **sizes, window=4, window_layers=(0,)))
    assert config["qk_norm"] and config["logit_softcap"] == 15.0
    assert config["windows"] == [4, None] and config["block"] is not None
    dynamic = RopeScaling("dynamic", factor=2.0, original_max_len=8)
    with pytest.raises(InputError, match="'dynamic' changes them with the length"):
        adapter.live_config(llama(30, **sizes, rope_scaling=dynamic))
    with pytest.raises(InputError, match="document_start"):
        adapter.live_config(gpt(30, **sizes, document_start=1))
