"""GPT-2 and Llama-family folders' pages in a real browser (Debian's chromium, headless,
offline): tiny random-weight folders made with transformers; the cells drawn are
transformers' eager attention to the page's rounding, and the console stays clean."""

import pytest

from qkv.explore import explore, load_folder, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_pretrained import TOLERANCE, gpt2_folder, reference_attention  # noqa: F401
from .test_pretrained_llama import save_random, save_tokenizer

pytestmark = pytest.mark.browser
transformers = pytest.importorskip("transformers")
TEXT = "the heaven and the earth, the waters"
#: family -> (transformers' model class, the page's architecture)
FAMILIES = {
    "gpt2": ("GPT2LMHeadModel", "GPT-2"),
    "llama": ("LlamaForCausalLM", "Llama"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2"),
    "mistral": ("MistralForCausalLM", "Mistral"),
}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tmp_path_factory, gpt2_folder):  # noqa: F811
    folder = tmp_path_factory.mktemp("pretrained-lm-pages")
    found = {}
    for family in FAMILIES:
        model_folder = gpt2_folder if family == "gpt2" else folder / family
        if family != "gpt2":
            save_random(model_folder, family)
            save_tokenizer(model_folder)
        loaded = load_folder(model_folder)
        data = explore(
            loaded.model,
            [TEXT],
            tokenizer=loaded.tokenizer,
            vectors="all",
            architecture=loaded.name,
        )
        write_html(data, folder / f"{family}.html")
        found[family] = (model_folder, loaded.tokenizer.encode(TEXT), loaded.name)
    return {"folder": folder, "found": found}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_cells_are_transformers_weights_and_the_console_is_clean(browser, pages, family):
    model_folder, ids, architecture = pages["found"][family]
    assert architecture == FAMILIES[family][1]
    browser.get_log("browser")  # start from an empty log
    open_page(browser, pages, family)
    reference = reference_attention(getattr(transformers, FAMILIES[family][0]), model_folder, ids)
    for layer, head in [(0, 0), (1, 3), (1, 1)]:
        request = {"layer": layer, "head": head, "word": 7}
        browser.execute_script("window.qkv.show(arguments[0])", request)
        theirs = reference[layer][0, head]
        drawn = cells(browser)
        assert len(drawn) == theirs.numel()
        for (row, col), value in drawn.items():
            assert abs(float(value) - float(theirs[row, col])) <= TOLERANCE
        steps = browser.execute_script("return window.qkv.neuron()")  # vectors="all"
        query, first = steps["query"], steps["first"]  # a sliding window starts past 0
        assert query == min(7, len(ids) - 1) and float(theirs[query, :first].sum()) == 0.0
        assert steps["weights"] == pytest.approx(
            theirs[query, first : query + 1].tolist(), abs=1e-4
        )
    assert browser.execute_script("return window.qkv.png('head')").startswith("data:image/png")
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
