"""Live explorer pages in a real browser (Debian's chromium, headless, offline): the page's own
forward pass (window.qkvLive.run) on random inputs gives PyTorch's float32 attention and
logits to 1e-4 and the same greedy output, for random-weight models of every family that
runs live, in the configurations their training options make."""

import random
import time

import pytest
import torch

from qkv.data import BOS_ID, EOS_ID, PAD_ID, CharTokenizer
from qkv.decoding import greedy_search
from qkv.explore import add_live, explore, write_html
from qkv.models import RNNConfig, RNNTranslator, Transformer, TransformerConfig

from .test_explore_browser import start_browser

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
