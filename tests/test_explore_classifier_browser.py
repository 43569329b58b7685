"""The classifier pages of the explorer in a real browser (Debian chromium through Selenium,
offline, one browser for the module, as in test_explore_browser.py)."""

import pytest
import torch

from qkv.explore import WEIGHT_SCALE, explore, write_html

from .test_explore_browser import cells, open_page, start_browser
from .test_explore_classifiers import (
    CLASSES,
    tiny_clip_classifier,
    tiny_image_classifier,
    tiny_tagger,
)

pytestmark = pytest.mark.browser

ONE_HOT_FRAME = 3  # the clip page's pooling weights made one-hot on this frame


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    yield from start_browser(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier-pages")
    clips = torch.rand(2, 6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    tagger = explore(tiny_tagger(), [clips[0, :5]], tokenizer=CLASSES, labels=[[0, 1, 2, 0, 1]])
    write_html(tagger, folder / "tagger.html")
    pooled = explore(tiny_clip_classifier(), list(clips), tokenizer=CLASSES, labels=[0, 2])
    # the second clip's weights made one-hot, so the test knows which bar must be full
    row = pooled["inputs"][1]["views"][0]["layers"][0]["heads"][0][0]
    row[:] = [WEIGHT_SCALE if t == ONE_HOT_FRAME else 0 for t in range(6)]
    write_html(pooled, folder / "clip.html")
    picture = explore(tiny_image_classifier(), [clips[0, 0]], tokenizer=CLASSES)
    write_html(picture, folder / "image.html")
    data = {"tagger": tagger, "clip": pooled, "image": picture}
    return {"folder": folder, "data": data}


def bars(browser) -> list[tuple[int, float, float]]:
    """Each frame's bar, in page order: (frame, data-weight, filled height in pixels)."""
    return browser.execute_script(
        "return [...document.querySelectorAll('#frames .weight-bar')].map(b => "
        "[Number(b.dataset.frame), Number(b.dataset.weight), b.firstChild.offsetHeight])"
    )


def test_show_draws_the_cells_of_a_frame_tagger_head(browser, pages):
    open_page(browser, pages, "tagger")
    view = pages["data"]["tagger"]["inputs"][0]["views"][0]
    for layer, head in [(1, 1), (0, 0), (1, "rollout")]:
        browser.execute_script("window.qkv.show(arguments[0])", {"layer": layer, "head": head})
        stored = view["layers"][layer]
        matrix = stored["rollout"] if head == "rollout" else stored["heads"][head]
        drawn = cells(browser)
        assert len(drawn) == 25
        for (row, col), weight in drawn.items():
            assert float(weight) == matrix[row][col] / WEIGHT_SCALE
    # the frame strip shows the chosen query frame's row of the head shown
    browser.execute_script("window.qkv.show({layer: 1, head: 0, word: 2})")
    assert [weight for _, weight, _ in bars(browser)] == [
        w / WEIGHT_SCALE for w in view["layers"][1]["heads"][0][2]
    ]


def test_clip_weights_sum_to_one_over_frames_and_sit_where_the_data_says(browser, pages):
    open_page(browser, pages, "clip")
    first = pages["data"]["clip"]["inputs"][0]["views"][0]["layers"][0]["heads"][0][0]
    drawn = bars(browser)
    assert [frame for frame, _, _ in drawn] == list(range(6))
    assert [weight for _, weight, _ in drawn] == [w / WEIGHT_SCALE for w in first]
    assert abs(sum(weight for _, weight, _ in drawn) - 1) < 6 * 0.5 / WEIGHT_SCALE
    assert browser.execute_script("return document.querySelectorAll('#frames img').length") == 6
    browser.execute_script("window.qkv.show({input: 1})")
    drawn = bars(browser)
    assert [weight for _, weight, _ in drawn] == [float(t == ONE_HOT_FRAME) for t in range(6)]
    heights = [height for _, _, height in drawn]
    assert heights[ONE_HOT_FRAME] > 40 and heights.count(0) == 5
    assert cells(browser)[(0, ONE_HOT_FRAME)] == "1"


def test_clicking_the_picture_picks_the_query_region(browser, pages):
    from selenium.webdriver.common.action_chains import ActionChains

    open_page(browser, pages, "image")
    overlay = browser.find_element("id", "overlay")
    width, height = overlay.size["width"], overlay.size["height"]
    row, col = 5, 2  # of the 7 x 7 grid; offsets are from the element's centre
    x = (col + 0.5) * width / 7 - width / 2
    y = (row + 0.5) * height / 7 - height / 2
    ActionChains(browser).move_to_element_with_offset(overlay, int(x), int(y)).click().perform()
    assert browser.execute_script("return window.qkv.current().word") == row * 7 + col
    title = browser.find_element("id", "word-title").text
    assert f"({row}, {col})" in title and "predicted" in title
