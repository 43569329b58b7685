"""The one check every pretrained loader passes a folder's weights and tokenizer through:
names, shapes, dtypes and finite values, and a tokenizer no larger than the vocabulary --
one CheckpointError each, never torch's traceback, never NaN that reads like a result."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from qkv.errors import CheckpointError
from qkv.pretrained import load_bert, load_gpt2, load_llama, load_pretrained

transformers = pytest.importorskip("transformers")

from tests.test_lm_gpt2 import save_random_gpt2  # noqa: E402
from tests.test_pretrained_llama import save_random  # noqa: E402


def _bert(folder):
    config = transformers.BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(36)])
    )


def _edit_weights(folder, edit):
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def _poison(tensors):
    name = next(n for n in sorted(tensors) if "attn" in n or "attention" in n)
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = float("nan")


LOADERS = {
    "gpt2": (save_random_gpt2, load_gpt2),
    "llama": (lambda folder: save_random(folder, "llama"), load_llama),
    "bert": (_bert, lambda folder: load_bert(folder)),
}


@pytest.mark.parametrize("family", sorted(LOADERS))
def test_weights_holding_nan_are_refused_by_every_loader(family, tmp_path):
    save, load = LOADERS[family]
    save(tmp_path)
    _edit_weights(tmp_path, _poison)
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        load(tmp_path)


@pytest.mark.parametrize("family", sorted(LOADERS))
def test_a_truncated_weights_file_is_one_checkpoint_error(family, tmp_path):
    save, load = LOADERS[family]
    save(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load(tmp_path)


@pytest.mark.parametrize("family", sorted(LOADERS))
def test_weights_that_disagree_with_the_config_are_one_checkpoint_error(family, tmp_path):
    save, load = LOADERS[family]
    save(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("n_embd", "hidden_size"):
        if key in config:
            config[key] *= 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError):
        load(tmp_path)


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    save_random_gpt2(tmp_path)
    vocabulary = {f"w{i}": i for i in range(400)}  # the model has 300 ids
    Tokenizer(models.WordLevel(vocabulary, unk_token="w0")).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="400 tokens, but its model has only 300"):
        load_pretrained(tmp_path)


def test_a_weight_of_integers_is_refused(tmp_path):
    save_random_gpt2(tmp_path)

    def to_int(tensors):
        tensors["transformer.wte.weight"] = tensors["transformer.wte.weight"].to(torch.int32)

    _edit_weights(tmp_path, to_int)
    with pytest.raises(CheckpointError, match="not floating-point"):
        load_gpt2(tmp_path)
