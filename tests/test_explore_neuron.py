"""The neuron view's data: q, k, v stored for the layers asked for, from which softmax(q k^T
/ sqrt(d)) (causal for an LM and a decoder) gives back the model's own weights (RoPE and
grouped KV heads included; a Transformer translator's encoder, decoder and cross-attention);
a layer whose positions bias the scores (ALiBi) stores why it has none."""

import pytest
import torch

from qkv.data import BOS_ID
from qkv.errors import InputError
from qkv.explore import causal_attention, explore, teacher_forced_attention
from qkv.explore.extract import decode_hypotheses
from qkv.explore.vectors import chosen_layers
from qkv.models import Transformer, TransformerConfig

from .test_explore_lm import tiny_lm, tiny_tokenizer


def softmax_of(vectors, causal):
    q, k = torch.tensor(vectors["q"]), torch.tensor(vectors["k"])  # (H, T, Dh), (Hkv, T, Dh)
    k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    scores = q @ k.transpose(-1, -2) * vectors["scale"]
    if causal:
        length = q.shape[1]
        scores = scores.masked_fill(torch.ones(length, length).triu(1).bool(), float("-inf"))
    return scores.softmax(-1)


@pytest.mark.parametrize(
    "fields", [{}, {"positions": "rope"}, {"positions": "rope", "num_kv_heads": 2}]
)
def test_the_stored_vectors_give_back_the_model_weights(fields):
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, layers=3, **fields)
    data = explore(model, ["and god said"], tokenizer=tokenizer, vectors=[0, 2])
    view = data["inputs"][0]["views"][0]
    assert sorted(view["vectors"]) == ["0", "2"] and view["causal"] is True
    expected = causal_attention(model, torch.tensor([tokenizer.encode("and god said")]))
    for layer in (0, 2):
        weights = softmax_of(view["vectors"][str(layer)], causal=True)
        assert (weights - expected[layer]).abs().max() < 1e-4  # 5 significant digits


def test_no_vectors_unless_asked_and_alibi_says_why():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size)
    assert explore(model, ["and"], tokenizer=tokenizer)["inputs"][0]["views"][0]["vectors"] == {}
    alibi = tiny_lm(tokenizer.vocab_size, positions="alibi")
    view = explore(alibi, ["and"], tokenizer=tokenizer, vectors="all")["inputs"][0]["views"][0]
    assert "ALiBi adds a bias" in view["vectors"]["1"]["absent"]


def test_bad_vectors_are_one_clear_error():
    assert chosen_layers("all", 3) == [0, 1, 2] and chosen_layers("2,0", 3) == [0, 2]
    with pytest.raises(InputError, match="layers 0..2"):
        chosen_layers("5", 3)
    with pytest.raises(InputError, match="'all' or layer numbers"):
        chosen_layers("first", 3)
    from .test_explore import tiny_rnn

    tokenizer = tiny_tokenizer()
    with pytest.raises(InputError, match="neuron view"):
        explore(tiny_rnn(tokenizer.vocab_size), ["a"], tokenizer=tokenizer, vectors="all")


@pytest.mark.parametrize("positions", ["sinusoidal", "rope"])
def test_a_translators_three_attentions_store_vectors_that_give_back_its_weights(positions):
    from .test_explore import tiny_tokenizer as words

    tokenizer = words()
    torch.manual_seed(0)
    config = TransformerConfig(
        source_vocab_size=tokenizer.vocab_size,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        positions=positions,
    )
    model = Transformer(config).eval()
    data = explore(model, ["the quick fox"], tokenizer=tokenizer, max_len=6, vectors=[1])
    page = data["inputs"][0]
    source = torch.tensor([tokenizer.encode("the quick fox")])
    greedy = decode_hypotheses(model, source, max_len=6)[0]  # what the page shows
    expected = teacher_forced_attention(model, source, torch.tensor([[BOS_ID, *greedy.ids]]))
    for view in page["views"]:
        name = view["id"]
        assert sorted(view["vectors"]) == ["1"] and view["causal"] is (name == "decoder")
        stored = view["vectors"]["1"]
        assert len(stored["k"][0]) == len(view["key_tokens"])  # cross: the source's keys
        weights = softmax_of(stored, causal=view["causal"])
        assert (weights - expected[name][1]).abs().max() < 1e-4  # 5 significant digits
