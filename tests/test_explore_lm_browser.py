"""A language model's explorer page in a real browser (Debian's chromium, headless, offline):
the cells drawn are the model's weights, the summary table offers the induction score, the
page draws the prompt and the generated tokens."""

import time

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


@pytest.fixture(scope="module")
def neuron_page(pages):
    tokenizer = pages["tokenizer"]
    model = tiny_lm(tokenizer.vocab_size, layers=2, heads=4, positions="rope", num_kv_heads=2)
    data = explore(model, ["and god said"], tokenizer=tokenizer, vectors=[1])
    write_html(data, pages["folder"] / "neuron.html")
    return {"model": model, "ids": torch.tensor([tokenizer.encode("and god said")])}


def test_the_neuron_view_steps_are_the_model_numbers(browser, pages, neuron_page):
    """The page's softmax weights equal the model's need_weights; its z_i for every head,
    through the layer's out_proj, equal the layer's output (caught by a hook)."""
    model, ids = neuron_page["model"], neuron_page["ids"]
    caught = {}
    layer = model.blocks[1].self_attention
    handle = layer.register_forward_hook(lambda m, args, out: caught.update(out=out[0][0]))
    expected = causal_attention(model, ids)[1]  # (H, T, T)
    handle.remove()
    open_page(browser, pages, "neuron")
    query = 6
    z = []
    for head in range(4):
        browser.execute_script(
            "window.qkv.show(arguments[0])", {"layer": 1, "head": head, "word": query}
        )
        steps = browser.execute_script("return window.qkv.neuron()")
        assert steps["query"] == query and len(steps["weights"]) == query + 1  # causal
        weights = torch.tensor(steps["weights"])
        assert (weights - expected[head, query, : query + 1]).abs().max() < 1e-4
        rows = browser.execute_script(
            "return [...document.querySelectorAll('table.neuron tr[data-key]')].map(r => Number(r.dataset.weight))"
        )
        assert rows == pytest.approx(steps["weights"])
        z.append(torch.tensor(steps["z"]))
    output = layer.out_proj(torch.cat(z).float())
    assert (output - caught["out"][query]).abs().max() < 1e-3


def test_the_neuron_view_exports_png_and_svg_with_its_numbers(browser, pages, neuron_page):
    import xml.etree.ElementTree as ET

    open_page(browser, pages, "neuron")
    query = 4
    browser.execute_script("window.qkv.show(arguments[0])", {"layer": 1, "head": 2, "word": query})
    steps = browser.execute_script("return window.qkv.neuron()")
    assert browser.execute_script("return window.qkv.png('neuron')").startswith(
        "data:image/png;base64,"
    )
    root = ET.fromstring(browser.execute_script("return window.qkv.svg('neuron')"))
    space = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{space}text")]
    assert all(f"{weight:.4f}" in texts for weight in steps["weights"])
    assert all(f"{score:.4f}" in texts for score in steps["scores"])
    dim = 16 // 4
    rects = list(root.iter(f"{space}rect"))[1:]  # after the background
    keys = query + 1  # causal: keys 0..query
    assert len(rects) == dim + keys * (3 * dim + 1) + dim  # q; k, q*k, weight, v per key; z
    browser.execute_script("window.qkv.show({layer: 0})")  # no vectors stored for layer 0
    error = browser.execute_script(
        "try { window.qkv.svg('neuron'); return ''; } catch (e) { return e.message; }"
    )
    assert "no steps" in error


def test_the_neuron_view_says_when_vectors_are_absent(browser, pages, neuron_page):
    open_page(browser, pages, "neuron")
    browser.execute_script("window.qkv.show({layer: 0, head: 1})")
    note = browser.find_element("id", "neuron-note").text
    assert "not stored for layer 0" in note and "--vectors 0" in note
    assert browser.execute_script("return window.qkv.neuron()") is None


def test_every_panel_exports_an_svg_and_the_head_svg_holds_the_weights(browser, pages):
    import xml.etree.ElementTree as ET

    open_page(browser, pages, "lm")
    browser.execute_script("window.qkv.show({layer: 1, head: 2})")
    drawn = cells(browser)
    root = ET.fromstring(browser.execute_script("return window.qkv.svg('head')"))
    space = "{http://www.w3.org/2000/svg}"
    rects = list(root.iter(f"{space}rect"))[1:]  # after the background
    titles = [float(r.find(f"{space}title").text) for r in rects]
    assert titles == [float(drawn[key]) for key in sorted(drawn)]  # row-major, every cell
    labels = [t.text for t in root.iter(f"{space}text")]
    assert "causal self-attention \u2014 layer 1, head 2" in labels
    grid = ET.fromstring(browser.execute_script("return window.qkv.svg('grid')"))
    (image,) = grid.iter(f"{space}image")
    assert image.get("href").startswith("data:image/png;base64,")
    for old in browser.downloads.glob("*"):
        old.unlink()
    browser.find_element("css selector", 'button[data-save-svg="head"]').click()
    deadline = time.monotonic() + 10
    while not list(browser.downloads.glob("*.svg")):
        assert time.monotonic() < deadline, "Save SVG wrote no file"
        time.sleep(0.1)


def test_a_char_level_lm_on_chinese_text_shows_the_characters(browser, pages, tmp_path):
    from qkv.data import CharTokenizer

    tokenizer = CharTokenizer.train(["我爱AI。我爱北京。"])
    model = tiny_lm(tokenizer.vocab_size)
    write_html(explore(model, ["我爱AI"], tokenizer=tokenizer), pages["folder"] / "cjk.html")
    open_page(browser, pages, "cjk")
    chips = browser.execute_script(
        "return [...document.querySelectorAll('#tokens .chip')].map(c => c.textContent)"
    )
    assert chips == ["我", "爱", "A", "I"]
    labels = browser.execute_script(
        "return [...document.querySelectorAll('#matrix .row-label')].map(c => c.textContent)"
    )
    assert labels == chips
    assert "我" in browser.execute_script("return window.qkv.svg('head')")


@pytest.mark.parametrize("window, kv_heads", [(None, 4), (100, 2)])
def test_a_long_input_is_computed_in_the_page_within_the_stated_error(
    browser, pages, window, kv_heads
):
    """Past DENSE_TOKENS the page holds q and k (float16) and computes a head's weights when
    shown, and the mean and rollout from them; they equal the model's within the errors the
    page states, plus its rounding.  A sliding window's keys are the model's too, and grouped
    KV heads read the k they share."""
    from qkv.data import CharTokenizer
    from qkv.explore import attention_rollout

    tokenizer = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz"])
    model = tiny_lm(
        tokenizer.vocab_size, layers=2, heads=4, num_kv_heads=kv_heads, max_len=1024, window=window
    )
    ids = torch.randint(
        4, tokenizer.vocab_size, (1024,), generator=torch.Generator().manual_seed(0)
    )
    data = explore(model, [ids.tolist()], tokenizer=tokenizer)
    view = data["inputs"][0]["views"][0]
    assert view["compact"] and "heads" not in view["layers"][0]
    assert [entry["compact"]["window"] for entry in view["layers"]] == [window, window]
    write_html(data, pages["folder"] / "long.html")
    started = time.perf_counter()
    open_page(browser, pages, "long")
    print(
        f"long page ({len(ids)} tokens, window {window}): open {time.perf_counter() - started:.2f} s"
    )
    expected = causal_attention(model, ids[None])
    rollout = attention_rollout(expected)
    picks = [(0, 0), (5, 2), (299, 0), (299, 150), (250, 249), (10, 200), (1023, 1000), (1023, 0)]
    for layer, head in [(0, 1), (1, 3), (1, "mean"), (1, "rollout")]:
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": layer, "head": head})
        while browser.execute_script("return window.qkv.pending()"):
            time.sleep(0.05)  # the mean and rollout are computed in slices
        drawn = browser.execute_script(
            "return arguments[0].map(([i, j]) => window.qkv.weight(i, j))", picks
        )
        if head == "mean":
            weights, error = expected[layer].mean(0), view["mean_error"]
        elif head == "rollout":
            weights, error = rollout[layer], view["rollout_error"]
        else:
            weights, error = expected[layer][head], view["max_error"]
        for (i, j), value in zip(picks, drawn, strict=True):
            assert abs(value - float(weights[i, j])) <= error + TOLERANCE, (head, i, j)
    assert browser.find_elements("css selector", ".matrix-canvas")
    assert max(view["max_error"], view["mean_error"], view["rollout_error"]) < 1e-3
    stats = browser.find_element("id", "head-stats").text
    assert "computed in the page from float16 q, k" in stats
    if window is not None:  # which blocks flex_attention computed: its own block mask's
        from torch.nn.attention.flex_attention import create_block_mask

        def within(b, h, q, k):
            return (q - k >= 0) & (q - k < window)

        blocks = create_block_mask(within, None, None, 1024, 1024, device="cpu").to_dense()
        browser.execute_script("window.qkv.show({layer: 1, head: 0})")
        stats = browser.find_element("id", "head-stats").text
        assert f"flex_attention computed {int(blocks.sum())} of 64 blocks of 128" in stats
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
