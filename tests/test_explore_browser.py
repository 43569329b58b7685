"""The explorer page in a real browser: Debian's chromium, headless, driven by Selenium
through chromium-driver, with the network switched off for the page.  One browser for the
whole module; tiny random-weight models built here."""

import base64
import io
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from qkv.data import BOS_ID
from qkv.explore import WEIGHT_SCALE, explore, write_html

from .test_explore import (
    SENTENCES,
    TOLERANCE,
    tiny_captioner,
    tiny_rnn,
    tiny_tokenizer,
    tiny_transformer,
)

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync "
    "--window-size=1400,1000"
).split()
ATTENDED_REGION = 6  # row 1, column 2 of the captioner's 4 x 4 grid


def _why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'qkv[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists() and shutil.which(Path(path).name) is None:
            return f"{path} is missing (apt-get install {package})"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


def start_browser(tmp_path_factory):
    """A headless chromium, offline, until the generator is closed (one per test module)."""
    reason = _why_no_browser()
    if reason:
        pytest.skip(f"no browser to test the explorer in: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(
        service=Service(CHROMEDRIVER if Path(CHROMEDRIVER).exists() else "chromedriver"),
        options=options,
    )
    downloads = tmp_path_factory.mktemp("downloads")
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(  # the page must not need the network: switch it off
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    driver.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    driver.downloads = downloads
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pages")
    tokenizer = tiny_tokenizer()
    transformer = tiny_transformer(tokenizer.vocab_size)  # 3 layers, 4 heads
    data = explore(transformer, SENTENCES, tokenizer=tokenizer, max_len=8)
    write_html(data, folder / "transformer.html")
    rnn_data = explore(tiny_rnn(tokenizer.vocab_size), SENTENCES[1:], tokenizer=tokenizer, beam=3)
    write_html(rnn_data, folder / "rnn.html")
    captioner, vocab = tiny_captioner()
    caption_data = explore(captioner, [torch.full((3, 32, 32), 0.5)], tokenizer=vocab)
    # the first word's map made one-hot, so the test knows where the brightest region must be
    first_word = caption_data["inputs"][0]["views"][0]["layers"][0]["heads"][0][0]
    first_word[:] = [WEIGHT_SCALE if p == ATTENDED_REGION else 0 for p in range(16)]
    write_html(caption_data, folder / "captioner.html")
    return {
        "folder": folder,
        "tokenizer": tokenizer,
        "transformer": transformer,
        "data": {"transformer": data, "rnn": rnn_data, "captioner": caption_data},
    }


def open_page(browser, pages, name: str) -> None:
    browser.get((pages["folder"] / f"{name}.html").as_uri())
    deadline = time.monotonic() + 10
    while browser.execute_script("return document.body.dataset.ready") != "true":
        assert time.monotonic() < deadline, f"{name}.html did not finish drawing"
        time.sleep(0.05)


def cells(browser) -> dict[tuple[int, int], str]:
    found = browser.execute_script(
        "return [...document.querySelectorAll('#matrix .cell')]"
        ".map(c => [Number(c.dataset.row), Number(c.dataset.col), c.dataset.weight])"
    )
    return {(row, col): weight for row, col, weight in found}


def png_is_not_blank(data: bytes, *, colours: int = 8) -> bool:
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    distinct = np.unique(pixels.reshape(-1, 3), axis=0)
    return pixels.shape[1] > 50 and len(distinct) >= colours


# ------------------------------------------------------------------------ tests


@pytest.mark.parametrize("name", ["transformer", "rnn", "captioner"])
def test_no_request_leaves_the_page_and_the_console_is_clean(browser, pages, name):
    browser.get_log("performance"), browser.get_log("browser")  # start from empty logs
    open_page(browser, pages, name)
    browser.execute_script("window.qkv.show({view: 0}); window.qkv.png('grid')")
    page_url = (pages["folder"] / f"{name}.html").as_uri()
    requested = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    assert requested, "the performance log recorded no request at all: the check is blind"
    assert all(url == page_url or url.startswith("data:") for url in requested), requested
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []


def test_show_layer_2_head_3_draws_that_heads_weights(browser, pages):
    open_page(browser, pages, "transformer")
    data, tokenizer, model = pages["data"]["transformer"], pages["tokenizer"], pages["transformer"]
    page = data["inputs"][1]
    source = torch.tensor([tokenizer.encode(SENTENCES[1])])
    target = torch.tensor([[BOS_ID, *tokenizer.encode(page["output"])]])
    with torch.no_grad():  # the library's own weights, computed here, not read from the page
        attention = model(source, target, need_weights=True).attention
    for index, name in enumerate(("encoder", "decoder", "cross")):
        state = browser.execute_script(
            f"return window.qkv.show({{input: 1, view: '{name}', layer: 2, head: 3}})"
        )
        assert state == {"input": 1, "view": name, "layer": 2, "head": 3, "word": 0}
        stored = page["views"][index]["layers"][2]["heads"][3]
        drawn = cells(browser)
        expected = attention[name][2][0, 3]  # (Tq, Tk)
        assert len(drawn) == expected.numel() == len(stored) * len(stored[0])
        for (row, col), weight in drawn.items():
            assert float(weight) == stored[row][col] / WEIGHT_SCALE
            assert abs(float(weight) - float(expected[row, col])) <= TOLERANCE


def test_the_neuron_panel_says_which_layers_a_translator_page_holds_q_k_v_for(browser, pages):
    open_page(browser, pages, "transformer")  # written without vectors
    browser.execute_script("window.qkv.show({view: 'cross', layer: 1, head: 0})")
    note = browser.find_element("id", "neuron-note").text
    assert "q, k and v were not stored for layer 1" in note and "--vectors 1" in note
    assert browser.execute_script("return window.qkv.neuron()") is None


def test_a_translators_neuron_view_steps_are_the_model_numbers(browser, pages, tmp_path):
    """With vectors for layer 1, each attention's steps give the model's own weights: the
    encoder's over the source, the decoder's causal, the cross-attention's over the source."""
    tokenizer, model = pages["tokenizer"], pages["transformer"]
    data = explore(model, SENTENCES[:1], tokenizer=tokenizer, max_len=8, vectors=[1])
    write_html(data, pages["folder"] / "transformer-neuron.html")
    page = data["inputs"][0]
    source = torch.tensor([tokenizer.encode(SENTENCES[0])])
    target = torch.tensor([[BOS_ID, *tokenizer.encode(page["output"])]])
    with torch.no_grad():
        attention = model(source, target, need_weights=True).attention
    open_page(browser, pages, "transformer-neuron")
    for name in ("encoder", "decoder", "cross"):
        expected = attention[name][1][0, 3]  # layer 1, head 3: (Tq, Tk)
        query = expected.shape[0] - 1
        browser.execute_script(
            "window.qkv.show(arguments[0])", {"view": name, "layer": 1, "head": 3, "word": query}
        )
        steps = browser.execute_script("return window.qkv.neuron()")
        assert steps["query"] == query
        seen = query + 1 if name == "decoder" else expected.shape[1]  # causal: j <= i
        assert len(steps["weights"]) == seen
        weights = torch.tensor(steps["weights"])
        assert (weights - expected[query, :seen]).abs().max() < 1e-4


def test_mean_and_rollout_are_selectable_like_heads_and_keys_move_the_selection(browser, pages):
    open_page(browser, pages, "transformer")
    layer = pages["data"]["transformer"]["inputs"][0]["views"][0]["layers"][1]
    browser.execute_script("window.qkv.show({view: 'encoder', layer: 1, head: 'rollout'})")
    drawn = cells(browser)
    assert all(float(w) == layer["rollout"][r][c] / WEIGHT_SCALE for (r, c), w in drawn.items())
    browser.execute_script("window.qkv.show({head: 'mean'})")
    heads = torch.tensor(layer["heads"], dtype=torch.float64)
    mean = (heads.mean(0) + 0.5).floor()  # the page rounds (Math.round) the stored heads' mean
    assert all(float(w) == mean[r, c] / WEIGHT_SCALE for (r, c), w in cells(browser).items())
    browser.execute_script("window.qkv.show({head: 0, layer: 0}); document.activeElement.blur()")
    body = browser.find_element("tag name", "body")
    body.send_keys("\ue014")  # arrow right: the next head
    body.send_keys("\ue015")  # arrow down: the next layer
    assert browser.execute_script("return window.qkv.current()")["head"] == 1
    assert browser.execute_script("return window.qkv.current()")["layer"] == 1


def test_hovering_a_token_highlights_its_row_and_column(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains

    open_page(browser, pages, "transformer")
    browser.execute_script("window.qkv.show({input: 1, view: 'encoder', layer: 0, head: 0})")
    small = "return document.querySelector('#grid canvas').toDataURL()"
    before = browser.execute_script(small)
    label = browser.find_element("css selector", '#matrix .row-label[data-row="2"]')
    ActionChains(browser).move_to_element(label).perform()
    assert browser.execute_script(small) != before  # the small matrices show the band too
    lit = browser.execute_script(
        "return [...document.querySelectorAll('#matrix .cell.hl')].map(c => [+c.dataset.row, +c.dataset.col])"
    )
    size = len(pages["data"]["transformer"]["inputs"][1]["source_tokens"])
    # self-attention: the token is both a query (row 2) and a key (column 2)
    assert {tuple(x) for x in lit} == {(2, c) for c in range(size)} | {(r, 2) for r in range(size)}
    chip = browser.find_element("css selector", '#tokens .chip[data-side="source"][data-index="4"]')
    ActionChains(browser).move_to_element(chip).perform()
    assert "hl" in chip.get_attribute("class")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#matrix .row-label.hl')].map(c => +c.dataset.row)"
    )
    assert rows == [4]


def test_the_captioner_overlay_is_brightest_where_the_data_says(browser, pages):
    from PIL import Image

    open_page(browser, pages, "captioner")
    browser.execute_script("window.qkv.show({word: 0})")
    shot = Image.open(io.BytesIO(browser.find_element("id", "overlay").screenshot_as_png))
    grey = np.asarray(shot.convert("L"), dtype=np.float64)
    height, width = grey.shape
    brightness = []
    for region in range(16):
        row, col = divmod(region, 4)
        patch = grey[
            row * height // 4 : (row + 1) * height // 4, col * width // 4 : (col + 1) * width // 4
        ]
        brightness.append(patch.mean())
    assert max(range(16), key=brightness.__getitem__) == ATTENDED_REGION
    assert brightness[ATTENDED_REGION] > 1.5 * sorted(brightness)[-2]  # clearly the peak
    frames = browser.find_elements("css selector", "#strip .frame")
    assert len(frames) == len(pages["data"]["captioner"]["inputs"][0]["views"][0]["query_tokens"])


def test_save_png_writes_a_picture_of_the_view(browser, pages):
    open_page(browser, pages, "transformer")
    for old in browser.downloads.glob("*"):
        old.unlink()
    browser.find_element("css selector", 'button[data-save="head"]').click()
    deadline = time.monotonic() + 10
    while not list(browser.downloads.glob("*.png")):
        assert time.monotonic() < deadline, "Save PNG wrote no file"
        time.sleep(0.1)
    (saved,) = browser.downloads.glob("*.png")
    time.sleep(0.2)  # let the browser finish the write
    assert png_is_not_blank(saved.read_bytes(), colours=20)
    # every panel's button draws through qkv.png(panel)
    for name, panels in (("transformer", ["grid"]), ("captioner", ["image", "strip", "head"])):
        open_page(browser, pages, name)
        for panel in panels:
            url = browser.execute_script(f"return window.qkv.png('{panel}')")
            assert url.startswith("data:image/png;base64,")
            assert png_is_not_blank(base64.b64decode(url.split(",", 1)[1]), colours=20), panel


@pytest.mark.parametrize(
    "name, views, panels",
    [
        ("transformer", ["encoder", "decoder", "cross"], ["head-panel", "grid-panel"]),
        ("rnn", [0, 1], ["head-panel", "grid-panel"]),
        ("captioner", [0], ["image-panel", "head-panel"]),
    ],
)
def test_a_screenshot_of_each_view_is_not_blank(browser, pages, name, views, panels):
    open_page(browser, pages, name)
    for view in views:
        browser.execute_script(f"window.qkv.show({{view: {json.dumps(view)}}})")
        for panel in panels:
            shot = browser.find_element("id", panel).screenshot_as_png
            assert png_is_not_blank(shot, colours=20), f"{name} {view} {panel} looks blank"


def test_the_dark_theme_follows_the_system_setting(browser, pages):
    open_page(browser, pages, "rnn")
    background = "return getComputedStyle(document.body).backgroundColor"
    light = browser.execute_script(background)
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    try:
        dark = browser.execute_script(background)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert light == "rgb(255, 255, 255)" and dark == "rgb(21, 23, 27)"


def test_the_address_names_the_view_and_follows_it(browser, pages):
    url = (pages["folder"] / "transformer.html").as_uri()
    browser.get(url + "#input=1&view=cross&layer=2&head=mean")
    assert browser.execute_script("return window.qkv.current()") == {
        "input": 1,
        "view": "cross",
        "layer": 2,
        "head": "mean",
        "word": 0,
    }
    browser.execute_script("window.qkv.show({view: 'encoder', head: 'rollout'})")
    assert browser.execute_script("return location.hash").endswith("head=rollout&word=0")


def test_the_notebook_frame_runs_the_same_page(browser, pages, tmp_path):
    from qkv.explore import iframe_html

    host = tmp_path / "notebook.html"
    data = pages["data"]["rnn"]
    host.write_text(f"<p>a notebook cell</p>{iframe_html(data, height=600)}", encoding="utf-8")
    browser.get_log("browser")  # start from an empty console
    browser.get(host.as_uri())
    browser.switch_to.frame(browser.find_element("tag name", "iframe"))
    try:
        deadline = time.monotonic() + 10
        while browser.execute_script("return document.body.dataset.ready") != "true":
            assert time.monotonic() < deadline, "the framed page did not finish drawing"
            time.sleep(0.05)
        state = browser.execute_script("return window.qkv.show({view: 1})")
        assert state["view"] == data["inputs"][0]["views"][1]["id"]
        assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
    finally:
        browser.switch_to.default_content()
