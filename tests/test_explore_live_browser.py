"""Live explorer pages in a real browser (Debian's chromium, headless, offline): the page's own
forward pass (window.qkvLive.run) on random inputs gives PyTorch's float32 attention and
logits to 1e-4 and the same greedy output, for random-weight models of every family that
runs live, in the configurations their training options make."""

import json
import random
import time

import pytest
import torch

from qkv.data import BOS_ID, EOS_ID, PAD_ID, BPETokenizer, CharTokenizer
from qkv.data.text_tokenizers import ByteBPETokenizer
from qkv.data.word_tokenizer import WordTokenizer
from qkv.decoding import greedy_search, sample
from qkv.explore import add_live, explore, write_html
from qkv.functional.rope_scaling import RopeScaling
from qkv.models import (
    DecoderLM,
    LMConfig,
    RNNConfig,
    RNNTranslator,
    Transformer,
    TransformerConfig,
)

from .test_explore_browser import cells, start_browser

pytestmark = pytest.mark.browser

#: The page's numbers against PyTorch float32's (the issue's bound).
BOUND = 1e-4
ALPHABET = "the quick brown fox jumps over 1998-03-03"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


def tokenizer() -> CharTokenizer:
    return CharTokenizer.train([ALPHABET])


def random_texts(count: int, seed: int, *, low: int = 1, high: int = 14) -> list[str]:
    """Random strings of the alphabet's characters, unknown ones included (they become <unk>)."""
    chars = sorted(set(ALPHABET)) + ["Z", "é"]
    generator = random.Random(seed)
    texts = []
    for _ in range(count):
        text = "".join(generator.choice(chars) for _ in range(generator.randint(low, high)))
        texts.append(text.strip() or "x")
    return texts


def live_page(browser, folder, name, model, inputs, *, tokenizer_, **options):
    data = explore(model, inputs, tokenizer=tokenizer_, **options)
    assert add_live(data, model, tokenizer_) is None
    path = write_html(data, folder / f"{name}.html")
    browser.get(path.as_uri())
    deadline = time.monotonic() + 10
    while browser.execute_script("return document.body.dataset.ready") != "true":
        assert time.monotonic() < deadline, f"{name}.html did not finish drawing"
        time.sleep(0.05)
    assert browser.execute_script("return typeof window.qkvLive.run") == "function"
    return data


def run(browser, text: str, options: dict | None = None) -> dict:
    return browser.execute_script(
        "return window.qkvLive.run(arguments[0], arguments[1])", text, options or {}
    )


def largest_difference(page, torch_weights) -> float:
    """The largest |page - torch| over nested lists and a tensor of the same shape."""
    page = torch.tensor(page, dtype=torch.float64)
    assert page.shape == torch_weights.shape, (page.shape, torch_weights.shape)
    return float((page - torch_weights.double()).abs().max())


def check_translator(result, model, text, tokenizer_, kinds):
    """The page's result for ``text`` against the model: greedy ids, logits, attention."""
    source_ids = tokenizer_.encode(text.strip())
    assert result["ids"]["source"] == source_ids
    source = torch.tensor([source_ids])
    limit = getattr(model.config, "max_len", None) if isinstance(model, Transformer) else None
    max_len = int(1.5 * len(source_ids)) + 10
    if limit is not None:
        max_len = min(max_len, limit - 1)
    found = greedy_search(
        model, source, max_len=max_len, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID
    )
    assert result["ids"]["output"] == found.tokens[0], text
    assert result["finished"] == bool(found.finished[0])
    assert result["output"] == tokenizer_.decode(found.tokens[0])
    target = torch.tensor([[BOS_ID, *found.tokens[0]]])
    with torch.no_grad():
        out = model(source, target, need_weights=True)
    assert largest_difference(result["logits"], out.logits[0]) <= BOUND
    assert abs(result["score"] - float(found.scores[0])) <= 1e-3
    for kind in kinds:
        layers = out.attention[kind]
        page = result["attention"][kind]
        assert len(page) == len(layers)
        for page_layer, weights in zip(page, layers, strict=True):
            weights = weights[0] if weights.dim() == 4 else weights  # (H, Tq, Tk) or (1, Tq, Tk)
            assert largest_difference(page_layer, weights) <= BOUND, (kind, text)


# ------------------------------------------------------------------------ the Transformer

TRANSFORMERS = {
    "post-LN sinusoidal relu": {},
    "pre-LN learned gelu": dict(norm_first=True, positions="learned", activation="gelu"),
    "rope gelu_tanh, untied": dict(positions="rope", activation="gelu_tanh", tie_output=False),
    "alibi, local encoder": dict(positions="alibi", encoder_window=2, norm_first=True),
    "learned_concat, final norms": dict(positions="learned_concat", final_norm=True, max_len=40),
}


def tiny_transformer(vocab_size: int, **changes) -> Transformer:
    torch.manual_seed(len(changes))
    options = dict(
        source_vocab_size=vocab_size,
        d_model=16,
        num_heads=4,
        d_ff=24,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_len=64,
        dropout=0.0,
    )
    model = Transformer(TransformerConfig(**{**options, **changes})).eval()
    with torch.no_grad():  # random weights end at once too often: make </s> a little less likely
        model.output.weight.mul_(3.0) if not model.config.tie_output else None
    return model


@pytest.mark.parametrize("name", list(TRANSFORMERS))
def test_a_transformer_page_recomputes_every_attention_as_pytorch(browser, tmp_path, name):
    tk = tokenizer()
    model = tiny_transformer(tk.vocab_size, **TRANSFORMERS[name])
    live_page(browser, tmp_path, "transformer", model, ["the fox"], tokenizer_=tk, max_len=8)
    for text in random_texts(4, seed=len(name)):
        result = run(browser, text)
        check_translator(result, model, text, tk, ("encoder", "decoder", "cross"))


# ------------------------------------------------------------------------ the language model

LMS = {
    "learned, pre-LN gelu": {},
    "sinusoidal, post-LN relu": dict(positions="sinusoidal", norm_first=False, activation="relu"),
    "rope, grouped KV heads, window": dict(positions="rope", num_kv_heads=2, window=5),
    "alibi, multi-query, no biases": dict(positions="alibi", num_kv_heads=1, bias=False),
    "gelu_tanh, untied": dict(activation="gelu_tanh", tie_embeddings=False, max_len=24),
    # Llama: RMSNorm, SwiGLU, RoPE at Llama 3's theta, no biases, untied, grouped KV heads
    "llama": dict(
        norm="rms",
        norm_eps=1e-6,
        feed_forward="gated",
        activation="silu",
        positions="rope",
        rope_base=500000.0,
        bias=False,
        tie_embeddings=False,
        num_kv_heads=2,
    ),
    # Qwen2's biases (Q, K, V only) and Llama 3.1's RoPE scaling, a window in one layer
    "qwen2 biases, llama3 scaling, SL windows": dict(
        norm="rms",
        feed_forward="gated",
        activation="silu",
        positions="rope",
        rope_scaling=RopeScaling("llama3", factor=8.0, original_max_len=8),
        output_bias=False,
        mlp_bias=False,
        window=4,
        window_layers=(0,),
    ),
    # nanochat: parameter-free RMSNorm (embeddings too), ReLU^2, QK-norm, soft-capped logits
    "nanochat": dict(
        norm="rms_free",
        activation="relu2",
        positions="rope",
        qk_norm=True,
        embedding_norm=True,
        logit_softcap=15.0,
        bias=False,
        tie_embeddings=False,
    ),
}


def tiny_lm(vocab_size: int, **changes) -> DecoderLM:
    torch.manual_seed(len(changes))
    options = dict(d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=64, dropout=0.0)
    model = DecoderLM(LMConfig(vocab_size, **{**options, **changes})).eval()
    with torch.no_grad():  # GPT-2's N(0, 0.02) start attends almost uniformly: sharpen it
        for name, parameter in model.named_parameters():
            if "norm" not in name:
                parameter.mul_(10.0)
    return model


@pytest.mark.parametrize("name", list(LMS))
def test_a_language_model_page_recomputes_every_attention_as_pytorch(browser, tmp_path, name):
    tk = tokenizer()
    model = tiny_lm(tk.vocab_size, **LMS[name])
    live_page(browser, tmp_path, "lm", model, ["the fox"], tokenizer_=tk)
    for index, text in enumerate(random_texts(4, seed=len(name))):
        generate = [0, 3, 12, 30][index]
        result = run(browser, text, {"generate": generate})
        prompt = torch.tensor([tk.encode(text)])
        limit = model.max_positions or 10**9
        expected = sample(
            model, prompt, max_new_tokens=min(generate, limit - prompt.shape[1]), temperature=0
        )
        assert result["ids"]["all"] == expected[0].tolist(), text
        assert result["output"] == tk.decode(expected[0, prompt.shape[1] :].tolist())
        with torch.no_grad():
            out = model(expected, need_weights=True)
        assert largest_difference(result["logits"], out.logits[0]) <= BOUND
        for page_layer, weights in zip(
            result["attention"]["self"], out.attention["self"], strict=True
        ):
            assert largest_difference(page_layer, weights[0]) <= BOUND, (text, name)


def test_seeded_sampling_repeats_and_a_new_seed_changes_the_text(browser, tmp_path):
    tk = tokenizer()
    model = tiny_lm(tk.vocab_size)
    live_page(browser, tmp_path, "lm", model, ["the fox"], tokenizer_=tk)
    options = {"generate": 40, "temperature": 1.0, "seed": 7}
    first, again = run(browser, "the ", options), run(browser, "the ", options)
    other = run(browser, "the ", {**options, "seed": 8})
    assert first["ids"] == again["ids"] and len(first["ids"]["output"]) == 40
    assert other["ids"]["output"] != first["ids"]["output"]
    top = run(browser, "the ", {**options, "topK": 1})  # top-1 sampling is greedy
    assert top["ids"]["output"] == run(browser, "the ", {"generate": 40})["ids"]["output"]


# ------------------------------------------------------------------------ the RNN translator

RNNS = {
    "additive GRU": {},
    "additive LSTM, 2 layers": dict(cell="lstm", num_layers=2, attention_dim=10),
    "dot GRU": dict(attention="dot"),
    "scaled_dot LSTM, input feeding": dict(attention="scaled_dot", cell="lstm", input_feeding=True),
    "general GRU, 2 layers, input feeding": dict(
        attention="general", num_layers=2, input_feeding=True
    ),
}


def tiny_rnn(vocab_size: int, **changes) -> RNNTranslator:
    torch.manual_seed(len(changes))
    options = dict(source_vocab_size=vocab_size, embedding_dim=12, hidden_dim=16, dropout=0.0)
    model = RNNTranslator(RNNConfig(**{**options, **changes})).eval()
    with torch.no_grad():  # sharper alignments than the default start
        for name, parameter in model.named_parameters():
            if "attention" in name:
                parameter.mul_(4.0)
    return model


@pytest.mark.parametrize("name", list(RNNS))
def test_an_rnn_page_recomputes_the_alignment_as_pytorch(browser, tmp_path, name):
    tk = tokenizer()
    model = tiny_rnn(tk.vocab_size, **RNNS[name])
    live_page(browser, tmp_path, "rnn", model, ["the fox"], tokenizer_=tk, beam=2)
    for text in random_texts(4, seed=len(name)):
        result = run(browser, text)
        T, S = len(result["logits"]), len(result["ids"]["source"])
        assert [len(result["attention"]["cross"]), len(result["attention"]["cross"][0])] == [1, 1]
        assert (
            len(result["attention"]["cross"][0][0]) == T
            and len(result["attention"]["cross"][0][0][0]) == S
        )
        check_translator(result, model, text, tk, ("cross",))


# ------------------------------------------------------------------------ the page around it


def test_typing_into_the_live_bar_adds_an_input_that_every_view_draws(browser, tmp_path):
    """Enter in the bar runs the model in the page; the new input's cells are the weights of
    window.qkvLive.run, its rollout and neuron view are drawn, and nothing leaves the page."""
    tk = tokenizer()
    model = tiny_transformer(tk.vocab_size, norm_first=True)
    browser.get_log("performance"), browser.get_log("browser")  # start from empty logs
    live_page(browser, tmp_path, "typed", model, ["the fox"], tokenizer_=tk, max_len=8)
    field = browser.find_element("id", "live-text")
    field.send_keys("over the brown fox\n")
    state = browser.execute_script("return window.qkv.current()")
    assert (
        state["input"] == 1 and browser.execute_script("return window.qkv.data.inputs.length") == 2
    )
    assert "computed in this page in" in browser.find_element("id", "live-note").text
    result = run(browser, "over the brown fox")
    for view, layer, head in [("encoder", 1, 2), ("decoder", 0, 3), ("cross", 1, 0)]:
        browser.execute_script(
            "window.qkv.show(arguments[0])",
            {"input": 1, "view": view, "layer": layer, "head": head},
        )
        expected = result["attention"][view][layer][head]
        for (row, col), weight in cells(browser).items():
            assert abs(float(weight) - expected[row][col]) <= 0.5 / 10_000 + 1e-9
    browser.execute_script(
        "window.qkv.show({input: 1, view: 'encoder', layer: 1, head: 'rollout'})"
    )
    assert len(cells(browser)) == len(result["ids"]["source"]) ** 2
    browser.execute_script("window.qkv.show({input: 1, view: 'cross', layer: 1, head: 2, word: 1})")
    steps = browser.execute_script("return window.qkv.neuron()")
    assert steps is not None
    assert (
        max(abs(a - b) for a, b in zip(steps["weights"], result["attention"]["cross"][1][2][1]))
        < 1e-9
    )
    requested = [
        json.loads(entry["message"])["message"]["params"]["request"]["url"]
        for entry in browser.get_log("performance")
        if json.loads(entry["message"])["message"]["method"] == "Network.requestWillBeSent"
    ]
    assert all(url.startswith(("file:", "data:")) for url in requested), requested
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


def test_a_bad_input_says_why_in_the_bar(browser, tmp_path):
    tk = tokenizer()
    model = tiny_transformer(tk.vocab_size, positions="learned", max_len=12)
    live_page(browser, tmp_path, "bad", model, ["the fox"], tokenizer_=tk, max_len=8)
    browser.find_element("id", "live-text").send_keys("the quick brown fox jumps\n")
    assert "positions reach 12" in browser.find_element("id", "live-note").text
    assert browser.execute_script("return window.qkv.data.inputs.length") == 1


def test_a_language_model_page_types_a_prompt_and_generates(browser, tmp_path):
    tk = tokenizer()
    model = tiny_lm(tk.vocab_size)
    data = live_page(browser, tmp_path, "lm-typed", model, ["the fox"], tokenizer_=tk)
    browser.find_element("id", "live-text").send_keys("the b\n")
    entry = browser.execute_script("return window.qkv.data.inputs[1]")
    assert entry["prompt_length"] == 5 and len(entry["source_tokens"]) == 5 + 20  # 20: the bar's
    expected = sample(model, torch.tensor([tk.encode("the b")]), max_new_tokens=20, temperature=0)
    assert entry["output"] == tk.decode(expected[0, 5:].tolist())
    written = data["inputs"][0]["views"][0]["layers"][1]["summaries"][2]["induction"]
    assert entry["views"][0]["layers"][1]["summaries"][2]["induction"] == written


# ------------------------------------------------------------------------ subword tokenizers

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "over 1998-03-03 the brown fox said: don't, it's late!",
    "  spaces  and\ttabs, café naïve",
] * 4


def subword_texts(seed: int) -> list[str]:
    """Texts of the corpus's words and characters, with unseen ones and doubled spaces."""
    generator = random.Random(seed)
    words = " ".join(CORPUS).split() + ["zebra", "ÿ", "1998", "it's", "x", "--"]
    texts = []
    for _ in range(6):
        chosen = [generator.choice(words) for _ in range(generator.randint(1, 6))]
        lead = " " if generator.random() < 0.3 else ""
        texts.append(lead + generator.choice([" ", "  "]).join(chosen))
    return texts


def test_a_bpe_translator_page_tokenizes_as_the_library(browser, tmp_path):
    tk = BPETokenizer.train(CORPUS, vocab_size=80, min_frequency=2)
    model = tiny_transformer(tk.vocab_size)
    live_page(browser, tmp_path, "bpe", model, ["the fox"], tokenizer_=tk, max_len=6)
    for text in subword_texts(0):
        result = run(browser, text, {"maxLen": 3})
        assert result["ids"]["source"] == tk.encode(text.strip()), text
        assert result["tokens"]["source"] == tk.tokens(tk.encode(text.strip()))
        assert result["output"] == tk.decode(result["ids"]["output"])


def test_a_word_tokenizer_rnn_page_tokenizes_and_aligns_as_the_library(browser, tmp_path):
    """Tutorial 4's translator: whole words (unseen ones <unk>, any whitespace between)."""
    tk = WordTokenizer.train(CORPUS)
    model = tiny_rnn(tk.vocab_size)
    live_page(browser, tmp_path, "words", model, ["the fox"], tokenizer_=tk)
    for text in [*subword_texts(2), "the\u00a0fox\u2003jumps \t zebra\u3000dog"]:
        result = run(browser, text)
        assert result["ids"]["source"] == tk.encode(text.strip()), text
        assert result["tokens"]["source"] == tk.tokens(tk.encode(text.strip()))
        assert result["output"] == tk.decode(result["ids"]["output"])
        check_translator(result, model, text, tk, ("cross",))


def test_a_byte_level_bpe_language_model_page_tokenizes_as_the_library(browser, tmp_path):
    tk = ByteBPETokenizer.train(CORPUS, vocab_size=300, min_frequency=2)
    model = tiny_lm(tk.vocab_size)
    live_page(browser, tmp_path, "bytebpe", model, ["the fox"], tokenizer_=tk)
    for text in [*subword_texts(1), "naïve café ÿ\n line"]:
        result = run(browser, text, {"generate": 6, "temperature": 1.0, "seed": 3})
        assert result["ids"]["source"] == tk.encode(text), text
        assert result["tokens"]["source"] == tk.tokens(tk.encode(text))
        assert result["output"] == tk.decode(result["ids"]["output"])


def test_a_live_page_runs_inside_a_notebook_frame(browser, tmp_path):
    """iframe_html (notebooks, the tutorials): the page in an <iframe srcdoc> still runs."""
    from qkv.explore import iframe_html

    tk = tokenizer()
    model = tiny_transformer(tk.vocab_size)
    data = explore(model, ["the fox"], tokenizer=tk, max_len=6)
    add_live(data, model, tk)
    host = tmp_path / "host.html"
    host.write_text(f"<!doctype html><meta charset='utf-8'>{iframe_html(data)}", encoding="utf-8")
    browser.get(host.as_uri())
    browser.switch_to.frame(browser.find_element("tag name", "iframe"))
    try:
        deadline = time.monotonic() + 10
        while browser.execute_script("return document.body?.dataset.ready") != "true":
            assert time.monotonic() < deadline, "the framed page did not finish drawing"
            time.sleep(0.05)
        result = run(browser, "fox over")
        check_translator(result, model, "fox over", tk, ("cross",))
    finally:
        browser.switch_to.default_content()


def test_the_webassembly_products_equal_the_javascript_loops(browser, tmp_path):
    """The page multiplies in WebAssembly (qkv/explore/wasm.py) where Chromium runs it; the
    JavaScript loops it falls back to give the same numbers, to float64's rounding."""
    tk = tokenizer()
    model = tiny_lm(tk.vocab_size, num_kv_heads=2)
    live_page(browser, tmp_path, "kernel", model, ["the fox"], tokenizer_=tk)
    fast = run(browser, "the brown fox", {"generate": 10})
    assert browser.execute_script("return window.qkvLive.kernel()") == "wasm"
    browser.execute_script("window.qkvLive.useKernel(false)")
    slow = run(browser, "the brown fox", {"generate": 10})
    assert browser.execute_script("return window.qkvLive.kernel()") == "js"
    assert fast["ids"] == slow["ids"]
    assert (
        largest_difference(fast["logits"], torch.tensor(slow["logits"], dtype=torch.float64)) < 1e-9
    )
    for a, b in zip(fast["attention"]["self"], slow["attention"]["self"], strict=True):
        assert largest_difference(a, torch.tensor(b, dtype=torch.float64)) < 1e-9
