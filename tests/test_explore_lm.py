"""The explorer and `qkv attention` for qkv's decoder-only language model: the page's
weights against the model's need_weights, the generated tokens against qkv.decoding.sample,
the induction score against its definition on a model built to have an induction head's
pattern, the .npz of every layer and head."""

import json
import re

import numpy as np
import pytest
import torch

from qkv.data import CharTokenizer
from qkv.decoding import sample
from qkv.errors import InputError
from qkv.explore import (
    WEIGHT_SCALE,
    causal_attention,
    explore,
    induction_scores,
    render_html,
)
from qkv.explore.language import INDUCTION_LENGTH
from qkv.models import DecoderLM, LMConfig

TOLERANCE = 0.5 / WEIGHT_SCALE + 1e-6
TEXT = "and god said, let there be light: and there was light."


def tiny_tokenizer() -> CharTokenizer:
    return CharTokenizer.train([TEXT])


def tiny_lm(vocab_size: int, *, layers: int = 2, heads: int = 4, max_len: int = 96, **fields):
    torch.manual_seed(0)
    config = LMConfig(
        vocab_size,
        d_model=16,
        num_heads=heads,
        num_layers=layers,
        d_ff=32,
        max_len=max_len,
        dropout=0.0,
        **fields,
    )
    return DecoderLM(config).eval()


def test_the_page_holds_every_layer_and_head_of_the_prompt_as_the_model_computes_them():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, layers=3)
    data = explore(model, ["and god said", "let there"], tokenizer=tokenizer)
    assert data["model"]["kind"] == "lm" and data["model"]["layers"] == 3
    for prompt, page in zip(["and god said", "let there"], data["inputs"], strict=True):
        ids = tokenizer.encode(prompt)
        expected = causal_attention(model, torch.tensor([ids]))
        [view] = page["views"]
        assert view["query_tokens"] == view["key_tokens"] == tokenizer.tokens(ids)
        assert len(view["layers"]) == 3 and page["output_tokens"] == []
        for entry, weights in zip(view["layers"], expected, strict=True):
            stored = torch.tensor(entry["heads"], dtype=torch.float64) / WEIGHT_SCALE
            assert torch.allclose(stored, weights.double(), atol=TOLERANCE, rtol=0)
            assert torch.all(stored.triu(1) == 0)  # causal: no weight on a later token
            assert "rollout" in entry and len(entry["summaries"]) == 4
            previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
            for summary, value in zip(entry["summaries"], previous, strict=True):
                assert summary["previous"] == pytest.approx(float(value), abs=1e-3)
                assert 0 <= summary["induction"] <= 1


def test_generated_tokens_are_those_sample_draws_with_the_same_seed():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size)
    data = explore(
        model, ["and god"], tokenizer=tokenizer, generate=6, seed=3, temperature=0.8, top_k=5
    )
    prompt = torch.tensor([tokenizer.encode("and god")])
    drawn = sample(model, prompt, max_new_tokens=6, seed=3, temperature=0.8, top_k=5)[0]
    [page] = data["inputs"]
    assert page["prompt_length"] == prompt.shape[1]
    assert page["source_tokens"] == tokenizer.tokens(drawn.tolist())
    assert page["output_tokens"] == tokenizer.tokens(drawn[prompt.shape[1] :].tolist())
    expected = causal_attention(model, drawn[None])
    stored = torch.tensor(page["views"][0]["layers"][1]["heads"], dtype=torch.float64)
    assert torch.allclose(stored / WEIGHT_SCALE, expected[1].double(), atol=TOLERANCE, rtol=0)


class _Copying(torch.nn.Module):
    """A stand-in with one head of each pattern, to test the induction score against its
    definition: head 0 attends to the token after the previous occurrence of the current
    token (an ideal induction head), head 1 to the previous token, head 2 to the first."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.config = LMConfig(vocab_size, d_model=12, num_heads=3, num_layers=1)
        self.max_positions = None

    def forward(self, ids, need_weights=False):
        tokens = ids[0].tolist()
        length = len(tokens)
        weights = torch.zeros(3, length, length)
        for i, token in enumerate(tokens):
            earlier = [j for j in range(i) if tokens[j] == token]
            weights[0, i, earlier[-1] + 1 if earlier else 0] = 1
            weights[1, i, max(i - 1, 0)] = 1
            weights[2, i, 0] = 1
        return type("Out", (), {"attention": {"self": [weights[None]]}})()

    def parameters(self):
        return iter([torch.zeros(1)])


def test_the_induction_score_finds_the_induction_head_and_no_other():
    scores = induction_scores(_Copying(40))
    assert scores.shape == (1, 3)
    assert scores[0, 0] == pytest.approx(1.0)
    assert scores[0, 1] == 0 and scores[0, 2] == 0


def test_the_induction_sequence_fits_learned_positions():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, max_len=20)
    assert induction_scores(model).shape == (2, 4)
    assert 2 * INDUCTION_LENGTH > 20


def test_lm_bad_inputs_are_one_clear_error():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, max_len=16)
    with pytest.raises(InputError, match="16 positions"):
        explore(model, ["and god said, let"], tokenizer=tokenizer)
    with pytest.raises(InputError, match="exceed"):
        explore(model, ["and god"], tokenizer=tokenizer, generate=12)
    with pytest.raises(InputError, match="empty prompt"):
        explore(model, [""], tokenizer=tokenizer)
    with pytest.raises(InputError, match="generate=-1"):
        explore(model, ["and"], tokenizer=tokenizer, generate=-1)


def test_generate_is_refused_for_a_translator():
    from .test_explore import tiny_transformer

    tokenizer = tiny_tokenizer()
    with pytest.raises(InputError, match="generate is for language models"):
        explore(tiny_transformer(tokenizer.vocab_size), ["and"], tokenizer=tokenizer, generate=2)


def test_the_page_offers_the_induction_score():
    tokenizer = tiny_tokenizer()
    page = render_html(explore(tiny_lm(tokenizer.vocab_size), ["god"], tokenizer=tokenizer))
    payload = re.search(r'id="qkv-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(payload)["model"]["kind"] == "lm"
    assert "induction score" in page


# -------------------------------------------------------------------- the commands


def _checkpoint(tmp_path):
    from qkv.training import save_checkpoint

    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size)
    run = tmp_path / "lm"
    save_checkpoint(run, model, step=1, tokenizers={"tokenizer": tokenizer})
    return run, model, tokenizer


def test_qkv_explore_and_attention_read_an_lm_checkpoint(tmp_path, capsys):
    from qkv.cli.main import main

    run, model, tokenizer = _checkpoint(tmp_path)
    out = tmp_path / "lm.html"
    args = ["explore", "--checkpoint", str(run), "and god", "--generate", "4", "--seed", "1"]
    assert main([*args, "--temperature", "0", "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="qkv-data">(.*?)</script>', page, re.S).group(1))
    greedy = sample(
        model, torch.tensor([tokenizer.encode("and god")]), max_new_tokens=4, temperature=0
    )
    assert data["inputs"][0]["source_tokens"] == tokenizer.tokens(greedy[0].tolist())

    png, npz = tmp_path / "lm.png", tmp_path / "lm.npz"
    args = ["attention", "--checkpoint", str(run), "and god said", "--layer", "1", "--head", "2"]
    assert main([*args, "--out", str(png), "--weights-out", str(npz)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    arrays = np.load(npz)
    ids = tokenizer.encode("and god said")
    expected = causal_attention(model, torch.tensor([ids]))
    assert sorted(arrays.files) == ["self.layer0", "self.layer1", "tokens"]
    assert list(arrays["tokens"]) == tokenizer.tokens(ids)
    for index, weights in enumerate(expected):
        assert arrays[f"self.layer{index}"].shape == (4, len(ids), len(ids))
        np.testing.assert_allclose(arrays[f"self.layer{index}"], weights.numpy(), atol=1e-6)


def test_qkv_attention_refuses_a_missing_head_and_a_generate_for_a_translator(tmp_path, capsys):
    from qkv.cli.main import main

    run, _, _ = _checkpoint(tmp_path)
    args = ["attention", "--checkpoint", str(run), "and", "--head", "9"]
    assert main([*args, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "head=9 does not exist" in err and "(set by --head 9)" in err
    assert main(["attention", "--checkpoint", str(run), "and"]) == 2
    assert "--weights-out" in capsys.readouterr().err


def test_qkv_attention_writes_every_attention_of_a_transformer(tmp_path, capsys):
    from qkv.cli.main import main
    from qkv.data import BOS_ID
    from qkv.explore import teacher_forced_attention
    from qkv.tasks import Translator
    from qkv.training import save_checkpoint

    from .test_explore import tiny_transformer

    tokenizer = tiny_tokenizer()
    run = tmp_path / "translator"
    model = tiny_transformer(tokenizer.vocab_size, layers=2, heads=2)
    metadata = {"setup": {"max_len": 32}}
    save_checkpoint(run, model, step=1, metadata=metadata, tokenizers={"tokenizer": tokenizer})
    npz = tmp_path / "t.npz"
    assert main(["attention", "--checkpoint", str(run), "and god", "--weights-out", str(npz)]) == 0
    arrays = np.load(npz)
    translator = Translator.from_checkpoint(run)
    (translation,) = translator.translate(["and god"])
    source = torch.tensor([tokenizer.encode("and god")])
    target = torch.tensor([[BOS_ID, *translation.ids]])
    expected = teacher_forced_attention(translator.model, source, target)
    names = [f"{view}.layer{i}" for view in ("encoder", "decoder", "cross") for i in range(2)]
    assert sorted(arrays.files) == sorted([*names, "tokens", "source_tokens"])
    assert list(arrays["source_tokens"]) == tokenizer.tokens(tokenizer.encode("and god"))
    assert list(arrays["tokens"]) == ["<s>", *translation.tokens]
    for view, layers in expected.items():
        for index, weights in enumerate(layers):
            np.testing.assert_allclose(arrays[f"{view}.layer{index}"], weights.numpy(), atol=1e-6)


def test_a_windowed_model_s_page_says_its_window_and_blocks():
    from torch.nn.attention.flex_attention import create_block_mask

    from qkv.functional.block_mask import DEFAULT_BLOCK_SIZE as FLEX_BLOCK

    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, layers=2, window=3)
    view = explore(model, ["and god said"], tokenizer=tokenizer)["inputs"][0]["views"][0]
    assert view["windows"] == [3, 3] and view["blocks"] == FLEX_BLOCK
    assert create_block_mask(lambda b, h, q, k: q >= k, None, None, 8, 8, "cpu").BLOCK_SIZE == (
        FLEX_BLOCK,
        FLEX_BLOCK,
    )
    plain = explore(tiny_lm(tokenizer.vocab_size), ["and god"], tokenizer=tokenizer)
    assert plain["inputs"][0]["views"][0]["blocks"] is None


def test_generation_on_the_page_stops_at_an_end_token():
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size)
    prompt = torch.tensor([tokenizer.encode("and god")])
    free = sample(model, prompt, max_new_tokens=8, temperature=0)[0, prompt.shape[1] :].tolist()
    end = free[2]
    data = explore(
        model, ["and god"], tokenizer=tokenizer, generate=8, temperature=0, eos_ids=[end]
    )
    [page] = data["inputs"]
    assert page["output_tokens"] == tokenizer.tokens(free[: free.index(end) + 1])
