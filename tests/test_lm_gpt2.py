"""GPT-2 checkpoints in qkv's layers: logits and greedy generations equal transformers'."""

import json
import os

import pytest
import torch

from qkv.decoding import sample
from qkv.errors import CheckpointError, MissingFileError
from qkv.pretrained import load_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
VOCAB = 300  # 256 bytes + 44 merges for the tokenizer test


def save_random_gpt2(folder, **overrides):
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=48,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **({"bos_token_id": None, "eos_token_id": None} | overrides),
    )
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # non-zero biases and norms, so a mix-up would show
        for name, parameter in reference.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    reference.save_pretrained(folder, safe_serialization=True)
    return reference


@pytest.mark.parametrize("tied", [True, False])
def test_logits_and_greedy_generations_equal_transformers(tmp_path, tied):
    reference = save_random_gpt2(tmp_path, tie_word_embeddings=tied)
    loaded = load_gpt2(tmp_path)
    ids = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(loaded.model(ids).logits, expected, rtol=0, atol=1e-4)

    prompt = ids[:, :5]
    with torch.no_grad():
        theirs = reference.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=25,
            do_sample=False,
            pad_token_id=0,
        )
    ours = sample(loaded.model, prompt, max_new_tokens=25, temperature=0)
    assert torch.equal(ours, theirs)


def test_missing_files_and_unsupported_options_are_clear_errors(tmp_path):
    with pytest.raises(MissingFileError, match="config.json"):
        load_gpt2(tmp_path)
    save_random_gpt2(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["scale_attn_by_inverse_layer_idx"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="scale_attn_by_inverse_layer_idx"):
        load_gpt2(tmp_path)


def test_the_folder_tokenizer_drives_generate_text(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from qkv.tasks.lm import generate_text

    reference = save_random_gpt2(tmp_path)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["the heaven and the earth, the waters"] * 5, trainer)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = load_gpt2(tmp_path)
    prompt = "the earth"
    ids = loaded.tokenizer.encode(prompt)
    assert loaded.tokenizer.decode(ids) == prompt
    (text,) = generate_text(loaded, prompt, max_new_tokens=12, temperature=0)
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0
        )
    assert text == loaded.tokenizer.decode(expected[0, len(ids) :])


def test_generation_stops_at_the_folders_end_token_as_transformers_does(tmp_path):
    from qkv.decoding import sample

    free = save_random_gpt2(tmp_path / "free")
    prompt = torch.tensor([[5, 17, 42]])
    with torch.no_grad():
        run = free.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    end = int(run[0, 6])
    reference = save_random_gpt2(tmp_path / "ends", eos_token_id=end)  # the same weights
    loaded = load_gpt2(tmp_path / "ends")
    assert loaded.eos_ids == (end,)
    with torch.no_grad():
        expected = reference.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert int(expected[0, -1]) == end and expected.shape[1] < 15
    ids = sample(loaded.model, prompt, max_new_tokens=12, temperature=0, eos_ids=loaded.eos_ids)
    assert torch.equal(ids, expected)
