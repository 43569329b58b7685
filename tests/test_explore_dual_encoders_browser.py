"""Dual-encoder pages (random-weight CLIP and SigLIP folders read by transformers through
qkv's attention) in a real browser (Debian's chromium, headless, offline): each entry opens
without console errors, the text tower's view draws the eager weights, the vision tower's
is drawn over the picture, and each entry lists its similarity to the other tower's
inputs."""

import pytest
import torch

from qkv.explore import explore, load_folder, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_dual_encoders import eager_run, save_dual, save_pictures
from .test_explore_transformers_folders import TARGET, TEXT, TOLERANCE

pytestmark = pytest.mark.browser
transformers = pytest.importorskip("transformers")
NAMES = ("clip", "siglip")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("dual-pages")
    pictures = [str(p) for p in save_pictures(root)]
    found = {}
    for name in NAMES:
        folder = save_dual(root, name)
        loaded = load_folder(folder)
        inputs = [pictures[0], TEXT, TARGET, pictures[1]]
        data = explore(loaded.model, inputs, tokenizer=loaded.tokenizer)
        write_html(data, root / f"{name}.html")
        found[name] = (folder, loaded, data)
    return {"folder": root, "found": found, "pictures": pictures}


@pytest.mark.parametrize("name", NAMES)
def test_each_entry_draws_its_towers_view_without_console_errors(browser, pages, name):
    _, loaded, data = pages["found"][name]
    browser.get_log("browser")  # start from an empty log
    open_page(browser, pages, name)
    architecture = loaded.name
    expected = (f"{architecture}: dual encoder", f"transformers {architecture} through qkv's")
    header = browser.find_element("id", "model-info").text
    assert all(part in header for part in expected), header
    for index, entry in enumerate(data["inputs"]):
        browser.execute_script("window.qkv.show({input: arguments[0]})", index)
        offered = browser.execute_script(
            "return [...document.querySelectorAll('#view-select option')].map(o => o.textContent)"
        )
        assert offered == [view["title"] for view in entry["views"]]
        for head in (0, "mean", "rollout"):
            browser.execute_script("window.qkv.show({layer: 1, head: arguments[0]})", head)
        picture = browser.execute_script(
            "return !document.getElementById('image-panel').classList.contains('hidden')"
        )
        assert picture is (entry["views"][0]["id"] == "vision")
        chips = browser.execute_script(
            "return [...document.querySelectorAll('.chip[data-side=similarity]')]"
            ".map(c => c.textContent)"
        )
        other = entry["similarity"]["names"]
        assert len(chips) == len(other)
        for chip, label, share in zip(
            chips, other, entry["similarity"]["probabilities"], strict=True
        ):
            assert chip.startswith(label[:20]) and f"{share:.3f}" in chip
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


@pytest.mark.parametrize("name", NAMES)
def test_the_cells_of_both_towers_are_the_eager_weights(browser, pages, name):
    folder, loaded, data = pages["found"][name]
    pictures = pages["pictures"]
    theirs, _ = eager_run(folder, loaded, [TEXT, TARGET], pictures)
    references = {
        1: theirs[0].text_model_output.attentions,
        2: theirs[1].text_model_output.attentions,
        0: [w[0:1] for w in theirs[0].vision_model_output.attentions],
        3: [w[1:2] for w in theirs[0].vision_model_output.attentions],
    }
    open_page(browser, pages, name)
    for index, reference in references.items():
        for layer, head in [(0, 0), (1, 3)]:
            request = {"input": index, "layer": layer, "head": head}
            browser.execute_script("window.qkv.show(arguments[0])", request)
            drawn = cells(browser)
            expected = reference[layer][0, head]
            assert len(drawn) == expected.numel()
            got = torch.zeros_like(expected)
            for (row, col), value in drawn.items():
                got[row, col] = float(value)
            assert (got - expected).abs().max() <= TOLERANCE
