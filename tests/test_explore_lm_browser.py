"""A language model's explorer page in a real browser (Debian's chromium, headless, offline):
the cells drawn are the model's weights, the summary table offers the induction score, the
page draws the prompt and the generated tokens."""

import pytest
import torch

from qkv.decoding import sample
from qkv.explore import WEIGHT_SCALE, causal_attention, explore, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_lm import TOLERANCE, tiny_lm, tiny_tokenizer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm-pages")
    tokenizer = tiny_tokenizer()
    model = tiny_lm(tokenizer.vocab_size, layers=2, heads=4)
    data = explore(model, ["and god said"], tokenizer=tokenizer, generate=5, seed=0)
    write_html(data, folder / "lm.html")
    return {"folder": folder, "data": data, "model": model, "tokenizer": tokenizer}


def test_the_cells_are_the_model_weights_for_every_head(browser, pages):
    open_page(browser, pages, "lm")
    prompt = torch.tensor([pages["tokenizer"].encode("and god said")])
    ids = sample(pages["model"], prompt, max_new_tokens=5, seed=0)
    expected = causal_attention(pages["model"], ids)
    length = ids.shape[1]
    for layer, head in [(0, 0), (1, 3), (1, "mean")]:
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": layer, "head": head})
        drawn = cells(browser)
        assert len(drawn) == length * length
        weights = expected[layer].mean(0) if head == "mean" else expected[layer][head]
        for (row, col), value in drawn.items():
            # the mean is rounded from the stored heads: two roundings, each half a unit
            bound = 2 * TOLERANCE if head == "mean" else TOLERANCE
            assert abs(float(value) - float(weights[row, col])) <= bound
    assert browser.execute_script("return window.qkv.current()")["head"] == "mean"


def test_the_summary_table_offers_the_induction_score(browser, pages):
    open_page(browser, pages, "lm")
    options = browser.execute_script(
        "return [...document.querySelectorAll('#metric-select option')].map(o => o.value)"
    )
    assert options == ["entropy", "diagonal", "previous", "first", "induction"]
    browser.execute_script(
        "const s = document.getElementById('metric-select'); s.value = 'induction';"
        "s.dispatchEvent(new Event('change'))"
    )
    shown = browser.execute_script(
        "return [...document.querySelectorAll('table.summaries tr')].slice(1)"
        ".map(r => [...r.querySelectorAll('td')].slice(0, 4).map(td => td.textContent))"
    )
    stored = pages["data"]["inputs"][0]["views"][0]["layers"]
    assert shown == [[f"{s['induction']:.2f}" for s in layer["summaries"]] for layer in stored]


def test_the_tokens_row_holds_the_prompt_and_the_generated_tokens(browser, pages):
    open_page(browser, pages, "lm")
    chips = browser.execute_script(
        "return [...document.querySelectorAll('#tokens .chip')].map(c => c.textContent)"
    )
    assert chips == pages["data"]["inputs"][0]["source_tokens"]
    assert len(chips) == len("and god said") + 5
    assert WEIGHT_SCALE == pages["data"]["weight_scale"]
