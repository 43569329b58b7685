"""Llama, Qwen2 and Mistral checkpoints in qkv's layers: logits, greedy generations and
attention weights equal transformers' (random small models saved with save_pretrained)."""

import json
import os

import pytest
import torch

from qkv.decoding import sample
from qkv.errors import CheckpointError, InputError, MissingFileError, QkvError
from qkv.models import DecoderLM, LoadedModel
from qkv.pretrained import load_llama, load_pretrained
from qkv.pretrained.llama import LLAMA_NAMES

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
VOCAB = 300  # 256 bytes + 44 merges for the tokenizer
SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
    initializer_range=0.1,  # logits of order 10, so a wrong rotation or mask shows
)
# family -> (transformers config class, model class, extra config fields)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "llama-biased-tied": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    ),
    "llama3-scaling": (
        "LlamaConfig",
        "LlamaForCausalLM",
        # head width 8, theta 20000: wavelengths 6.3 (kept), 75 (interpolated), 890 and
        # 10600 (divided by the factor) against the thresholds 128 / 4 and 128 / 1
        dict(
            rope_theta=20000.0,
            max_position_embeddings=256,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=128,
            ),
        ),
    ),
    "linear-scaling": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(rope_scaling=dict(rope_type="linear", factor=2.0)),
    ),
    # max_position_embeddings 16: the sequences below run past it, where dynamic RoPE stretches
    "dynamic-scaling": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(rope_scaling=dict(rope_type="dynamic", factor=2.0), max_position_embeddings=16),
    ),
    # sliding window 4 in block 1 only (max_window_layers=1), shorter than the sequences
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(use_sliding_window=True, sliding_window=4, max_window_layers=1, rope_theta=1e6),
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=5)),
}


def save_random(folder, family, **overrides):
    """A random-weight transformers model of ``family`` saved into ``folder``; returned in
    eval mode with eager attention (which can return its weights)."""
    config_name, model_name, extra = FAMILIES[family]
    fields = {**SIZES, **extra, **overrides}
    config = getattr(transformers, config_name)(**fields)
    torch.manual_seed(0)
    reference = getattr(transformers, model_name)(config)
    with torch.no_grad():  # non-zero biases, norms away from 1, so a mix-up would show
        for name, parameter in reference.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    reference.save_pretrained(folder, safe_serialization=True)
    reference.config._attn_implementation = "eager"  # noqa: SLF001 - the reference's weights
    return reference.eval()


def save_tokenizer(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(["the heaven and the earth, the waters"] * 5, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))


def random_ids(batch, length, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_attention_and_greedy_generations_equal_transformers(tmp_path, family):
    reference = save_random(tmp_path, family)
    loaded = load_llama(tmp_path)
    assert isinstance(loaded, LoadedModel) and isinstance(loaded.model, DecoderLM)
    assert loaded.folder and loaded.name == LLAMA_NAMES[loaded.model_type]
    ids = random_ids(3, 20)
    with torch.no_grad():
        expected = reference(ids, output_attentions=True)
        ours = loaded.model(ids, need_weights=True)
    torch.testing.assert_close(ours.logits, expected.logits, rtol=0, atol=1e-4)
    assert len(ours.attention["self"]) == len(expected.attentions) == 2
    for mine, theirs in zip(ours.attention["self"], expected.attentions, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)

    prompt = ids[:, :5]
    with torch.no_grad():
        theirs = reference.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=25,
            do_sample=False,
            pad_token_id=0,
        )
    assert torch.equal(sample(loaded.model, prompt, max_new_tokens=25, temperature=0), theirs)


def test_a_sliding_window_hides_keys_beyond_it(tmp_path):
    save_random(tmp_path, "mistral")
    model = load_llama(tmp_path).model
    ids = random_ids(1, 12)
    weights = model(ids, need_weights=True).attention["self"]
    query, key = torch.meshgrid(torch.arange(12), torch.arange(12), indexing="ij")
    outside = (key > query) | (query - key >= 5)
    for layer in weights:
        assert torch.all(layer[..., outside] == 0)
        assert torch.all(layer[..., ~outside] > 0)
    # changing a token 5 or more positions back changes nothing in a 1-block model ...
    one_block = load_llama(_with_config(tmp_path, num_hidden_layers=1, strict=False)).model
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % VOCAB
    torch.testing.assert_close(one_block(changed).logits[0, 5:], one_block(ids).logits[0, 5:])


def _with_config(folder, *, strict=True, **fields):
    """Rewrite config.json in place with ``fields`` changed; returns the folder."""
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    if not strict:  # drop the weights of blocks the new config does not have
        from safetensors.torch import load_file, save_file

        weights = load_file(str(folder / "model.safetensors"))
        keep = {
            name: tensor
            for name, tensor in weights.items()
            if not name.startswith("model.layers.")
            or int(name.split(".")[2]) < config["num_hidden_layers"]
        }
        save_file(keep, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_sharded_weights_load_like_one_file(tmp_path):
    reference = save_random(tmp_path / "one", "llama")
    reference.save_pretrained(tmp_path / "shards", max_shard_size="20KB")
    assert (tmp_path / "shards" / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "shards" / "model.safetensors").exists()
    ids = random_ids(2, 9)
    one, shards = load_llama(tmp_path / "one").model, load_llama(tmp_path / "shards").model
    assert torch.equal(one(ids).logits, shards(ids).logits)


def test_load_pretrained_dispatches_and_the_tokenizer_drives_generate_text(tmp_path):
    from qkv.tasks.lm import generate_text

    reference = save_random(tmp_path, "qwen2")
    save_tokenizer(tmp_path)
    loaded = load_pretrained(tmp_path)
    assert loaded.model_type == "qwen2" and isinstance(loaded.model, DecoderLM)
    prompt = "the earth"
    ids = loaded.tokenizer.encode(prompt)
    assert loaded.tokenizer.decode(ids) == prompt
    (text,) = generate_text(loaded, prompt, max_new_tokens=12, temperature=0)
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0
        )
    assert text == loaded.tokenizer.decode(expected[0, len(ids) :])


def test_text_longer_than_the_positions_is_a_clear_error(tmp_path):
    save_random(tmp_path, "llama")
    model = load_llama(tmp_path).model
    assert model.max_positions == 64
    with pytest.raises(InputError, match="64 positions this model was trained for"):
        model(random_ids(1, 65))
    state = model.start(random_ids(1, 63))
    model.step(torch.tensor([1]), state)  # position 63: the last one
    with pytest.raises(InputError, match="max_position_embeddings"):
        model.step(torch.tensor([1]), state)


def test_bad_folders_are_one_clear_error_each(tmp_path):
    with pytest.raises(MissingFileError, match="no model folder"):
        load_pretrained(tmp_path / "absent")
    with pytest.raises(MissingFileError, match="config.json"):
        load_pretrained(tmp_path)
    save_random(tmp_path, "llama")
    with pytest.raises(MissingFileError, match=r"no tokenizer.*tokenizer\.json.*'qwen2'"):
        load_pretrained(tmp_path)
    save_tokenizer(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    with pytest.raises(MissingFileError, match=r"no weights.*model\.safetensors"):
        load_pretrained(tmp_path)
    (tmp_path / "elsewhere.safetensors").rename(tmp_path / "model.safetensors")
    _with_config(tmp_path, model_type="falcon")
    with pytest.raises(CheckpointError, match=r"model_type='falcon'.*'bert', 'gpt2', 'llama'"):
        load_pretrained(tmp_path)
    _with_config(tmp_path, model_type="llama", rope_scaling={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(CheckpointError, match=r"'yarn'.*supported: \['default', 'dynamic'"):
        load_pretrained(tmp_path)
    _with_config(tmp_path, rope_scaling=None, num_hidden_layers=3)
    with pytest.raises(CheckpointError, match=r"lack 'layers\.2\.self_attn\.q_proj\.weight'"):
        load_pretrained(tmp_path)
    for error in (MissingFileError, CheckpointError):
        assert issubclass(error, QkvError)


def test_older_config_files_with_rope_scaling_load_the_same(tmp_path):
    reference = save_random(tmp_path, "llama3-scaling")
    config = json.loads((tmp_path / "config.json").read_text())
    params = config.pop("rope_parameters")
    config["rope_theta"] = params.pop("rope_theta")  # transformers 4's layout
    config["rope_scaling"] = {"type": params.pop("rope_type"), **params}
    (tmp_path / "config.json").write_text(json.dumps(config))
    ids = random_ids(2, 30)
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(load_llama(tmp_path).model(ids).logits, expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "parameters, length",
    [
        (dict(rope_type="linear", factor=4.0), 0),
        (dict(rope_type="dynamic", factor=2.0), 16),  # within max_position_embeddings: plain
        (dict(rope_type="dynamic", factor=2.0), 200),
        (
            dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8192,
            ),
            0,
        ),
    ],
)
def test_scaled_frequencies_equal_transformers(parameters, length):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from qkv.functional.rope_scaling import RopeScaling, rope_inverse_frequency

    config = transformers.LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        max_position_embeddings=131072 if parameters["rope_type"] == "llama3" else 64,
        rope_parameters={"rope_theta": 500000.0, **parameters},
    )
    theirs, _ = ROPE_INIT_FUNCTIONS[parameters["rope_type"]](config, seq_len=length or None)
    original = parameters.get("original_max_position_embeddings", 64)
    scaling = RopeScaling(
        kind=parameters["rope_type"],
        factor=parameters["factor"],
        low_freq_factor=parameters.get("low_freq_factor", 1.0),
        high_freq_factor=parameters.get("high_freq_factor", 4.0),
        original_max_len=original if parameters["rope_type"] != "linear" else None,
    )
    ours = rope_inverse_frequency(128, base=500000.0, scaling=scaling, length=length)
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-5, atol=0)
