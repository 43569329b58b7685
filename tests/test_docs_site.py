"""The built documentation site in a real browser (Debian's chromium, headless, through
chromium-driver): a tutorial in both languages, a reference page and an embedded explorer
page are each drawn, log no console error, and request nothing from outside the site; every
page of both languages is walked and read as a learner would see it (no console error, no
request leaving the site, every picture described, every formula inside its column or in a
box with a visible scrollbar, no TeX or Sphinx markup and no talk of the team's process shown
as text); search is per language and finds Chinese words inside longer ones.

The site is what ``python docs/build.py`` wrote to site/ (.ci/run builds it, then runs this
module); without it the tests skip, saying so.  It is served from 127.0.0.1 by a server in
this process, and every other host is unreachable: the browser resolves no other name.
"""

import functools
import http.server
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from .test_explore_browser import CHROMEDRIVER, CHROMIUM, FLAGS, _why_no_browser

pytestmark = pytest.mark.browser

#: The built site: site/ of this checkout, or the folder QKV_DOCS_SITE names (a draft build)
SITE = Path(os.environ.get("QKV_DOCS_SITE") or Path(__file__).resolve().parent.parent / "site")
#: Every name but the local server's resolves to nothing: the network is off for the pages.
NO_NETWORK = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


@pytest.fixture(scope="module")
def site_url():
    if not (SITE / "index.html").is_file():
        pytest.skip(f"the site is not built ({SITE} has no index.html): run python docs/build.py")
    handler = functools.partial(QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    reason = _why_no_browser()
    if reason:
        pytest.skip(f"no browser to test the site in: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, NO_NETWORK]:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    yield driver
    driver.quit()


def open_and_check(browser, url: str, site_url: str, *, settle: float = 1.0) -> None:
    """Load ``url``, wait until it has loaded, and check that no request left the site and
    the console holds no error or warning."""
    browser.get_log("performance"), browser.get_log("browser")  # start from empty logs
    browser.get(url)
    deadline = time.monotonic() + 20
    while browser.execute_script("return document.readyState") != "complete":
        assert time.monotonic() < deadline, f"{url} did not finish loading"
        time.sleep(0.05)
    time.sleep(settle)  # the search index and the math are made after the load event
    requested = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.append(message["params"]["request"]["url"])
    assert url in requested, "the performance log did not record the page: the check is blind"
    outside = [u for u in requested if not u.startswith((site_url, "data:", "blob:", "about:"))]
    assert outside == [], f"requests left the site: {outside}"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors


def rendered_math(browser) -> tuple[int, int, int]:
    """(math elements, of them typeset by KaTeX, KaTeX errors) on the page."""
    return browser.execute_script(
        "return [document.querySelectorAll('.arithmatex').length,"
        " document.querySelectorAll('.arithmatex .katex').length,"
        " document.querySelectorAll('.katex-error').length]"
    )


@pytest.mark.parametrize("language", ["", "zh/"])
def test_a_tutorial_is_drawn_with_its_math_figures_and_outputs(browser, site_url, language):
    url = f"{site_url}/{language}tutorials/01-self-attention.html"
    open_and_check(browser, url, site_url)
    found, typeset, errors = rendered_math(browser)
    assert found >= 5 and typeset == found and errors == 0, (found, typeset, errors)
    figures = browser.execute_script(
        "return [...document.querySelectorAll('.qkv-figure img')]"
        ".map(i => [i.complete, i.naturalWidth])"
    )
    assert figures and all(done and width > 100 for done, width in figures), figures
    outputs = browser.execute_script("return document.body.innerText")
    assert "qkv output equals ours: True" in outputs and "PyTorch equals ours:    True" in outputs
    title = browser.execute_script("return document.querySelector('h1').innerText")
    assert ("手算" in title) == (language == "zh/"), title


def test_a_reference_page_shows_the_docstrings_and_their_math(browser, site_url):
    open_and_check(browser, f"{site_url}/reference/functional.html", site_url)
    headings = browser.execute_script(
        "return [...document.querySelectorAll('.doc-heading')].map(h => h.innerText)"
    )
    assert any("attention" in h for h in headings) and len(headings) > 10, headings
    found, typeset, errors = rendered_math(browser)
    assert found >= 1 and typeset == found and errors == 0, (found, typeset, errors)


@pytest.mark.parametrize("name", ["transformer", "rnn", "captioner", "clips", "lm", "pretrained"])
def test_an_embedded_explorer_page_is_drawn(browser, site_url, name):
    open_and_check(browser, f"{site_url}/examples/{name}.html", site_url)
    frame = browser.find_element("css selector", "iframe.qkv-explorer")
    browser.switch_to.frame(frame)
    try:
        deadline = time.monotonic() + 10
        while browser.execute_script("return document.body.dataset.ready") != "true":
            assert time.monotonic() < deadline, f"the {name} explorer did not finish drawing"
            time.sleep(0.05)
        drawn = browser.execute_script("return document.querySelectorAll('canvas, .cell').length")
        assert drawn > 0
    finally:
        browser.switch_to.default_content()
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors


#: The tutorials that embed a live explorer page: a learner types into the model itself.
LIVE_TUTORIALS = ["04-translation", "05-transformer", "08-language-model"]


@pytest.mark.parametrize("language", ["", "zh/"])
@pytest.mark.parametrize("page", LIVE_TUTORIALS)
def test_a_tutorials_live_page_recomputes_its_own_example_offline(
    browser, site_url, page, language
):
    """The page's forward pass (window.qkvLive.run) runs inside the tutorial, with the network
    off, and gives for the page's first input the attention that PyTorch computed when the
    page was built (stored to 4 decimals): the translators' greedy output as well, the
    language model for its prompt and the continuation the build sampled."""
    open_and_check(browser, f"{site_url}/{language}tutorials/{page}.html", site_url)
    frames = browser.find_elements("css selector", "iframe[srcdoc]")
    assert len(frames) == 1, f"{page}: {len(frames)} embedded explorers"
    browser.switch_to.frame(frames[0])
    try:
        deadline = time.monotonic() + 20
        while browser.execute_script("return document.body.dataset.ready") != "true":
            assert time.monotonic() < deadline, f"{page}: the explorer did not finish drawing"
            time.sleep(0.05)
        data = browser.execute_script("return window.qkv.data")
        family = browser.execute_script("return window.qkvLive.family")
        example = data["inputs"][0]
        if family == "lm":
            text = example["source"] + example["output"]
            result = browser.execute_script(
                "return window.qkvLive.run(arguments[0], {generate: 0})", text
            )
            assert len(result["tokens"]["source"]) == len(example["source_tokens"])
        else:
            result = browser.execute_script(
                "return window.qkvLive.run(arguments[0])", example["source"]
            )
            assert result["output"] == example["output"], (result["output"], example["output"])
        scale = data["weight_scale"]
        compared = 0
        for view in example["views"]:
            kind = "cross" if view["kind"] == "alignment" else view["id"]
            live = result["attention"][kind]
            assert len(live) == len(view["layers"]), (page, kind)
            for live_layer, layer in zip(live, view["layers"], strict=True):
                for live_head, head in zip(live_layer, layer["heads"], strict=True):
                    for live_row, row in zip(live_head, head, strict=True):
                        assert len(live_row) == len(row)
                        worst = max(abs(a - b / scale) for a, b in zip(live_row, row))
                        assert worst <= 1e-4 + 0.5 / scale, (page, kind, worst)
                        compared += 1
        assert compared > 10, compared
    finally:
        browser.switch_to.default_content()
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == [], errors


# ---------------------------------------------------------------------------------------
# Every page, both languages.


def site_pages() -> list[str]:
    """Every HTML page of the site, as paths relative to it, but the explorer pages that
    the examples embed (the embedding test above draws those) and the theme's assets."""
    if not SITE.is_dir():
        return []
    return sorted(
        path.relative_to(SITE).as_posix()
        for path in SITE.rglob("*.html")
        if not {"pages", "assets"} & set(path.relative_to(SITE).parts[:-1])
    )


#: Alt text that says nothing about the picture.
GENERIC_ALT = re.compile(
    r"^(figure|fig|image|img|picture|pic|photo|plot|graph|chart|diagram|screenshot|icon|"
    r"output|untitled|alt|png|logo)\s*\d*$",
    re.IGNORECASE,
)
FILE_NAME = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|gif|svg|webp|bmp)$", re.IGNORECASE)
#: TeX that reached the reader as text (the math renderer missed it).
RAW_TEX = re.compile(
    r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|mathrm|operatorname|top|cdot|qquad|quad|left|right"
    r"|sum|alpha|beta|theta|lambda|sigma|odot|in|le|ge|times)\b"
)
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`")
#: Talk of how the team works, not of what the reader uses.
PROCESS = re.compile(
    r"\bissues?\s+#?\d+|\bthe issue(?:'s)?\s+(?:asks|expects|sets|names|wants)\b|"
    r"\b(?:this|that|the (?:first|second|third)) session\b",
    re.IGNORECASE,
)

#: Text the reader sees outside code: every visible text node not in a code block, a
#: script, or typeset math (KaTeX keeps its TeX in a hidden annotation).
PROSE_JS = """
const parts = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const parent = node.parentElement;
  if (!parent || parent.closest('pre, code, script, style, textarea, .katex, noscript')) continue;
  if (!parent.getClientRects().length) continue;           // not drawn
  parts.push(node.textContent);
}
return parts.join(' ');
"""

#: Each display formula: its size against its box's, how the box overflows, the space its
#: scrollbar takes, and whether a ::-webkit-scrollbar rule of the page's styles draws it.
FORMULAS_JS = """
const styled = [];
for (const sheet of document.styleSheets) {
  let rules;
  try { rules = sheet.cssRules; } catch (e) { continue; }
  for (const rule of rules) {
    if (rule.selectorText && rule.selectorText.includes('::-webkit-scrollbar')) {
      for (const part of rule.selectorText.split(',')) {
        if (part.includes('::-webkit-scrollbar')) styled.push(part.split('::')[0].trim());
      }
    }
  }
}
return [...document.querySelectorAll('div.arithmatex')].map(box => {
  const style = getComputedStyle(box);
  return {
    text: box.textContent.slice(0, 60),
    content: box.scrollWidth, box: box.clientWidth,
    left: box.getBoundingClientRect().left, right: box.getBoundingClientRect().right,
    page: document.documentElement.clientWidth,
    overflow: style.overflowX,
    bar: box.offsetHeight - box.clientHeight
         - parseFloat(style.borderTopWidth) - parseFloat(style.borderBottomWidth),
    styled: styled.some(selector => selector && box.matches(selector)),
  };
});
"""


def formula_problems(browser) -> list[str]:
    """Display formulas outside the page, or wider than their box without a scrollbar the
    page draws."""
    problems = []
    for f in browser.execute_script(FORMULAS_JS):
        if f["left"] < -1 or f["right"] > f["page"] + 1:
            problems.append(f"box outside the page: {f}")
        elif f["content"] > f["box"] + 1 and not (
            f["overflow"] in ("auto", "scroll") and f["styled"] and f["bar"] >= 4
        ):
            problems.append(f"cut off without a visible styled scrollbar: {f}")
    return problems


def image_problems(browser) -> list[str]:
    alts = browser.execute_script(
        "return [...document.querySelectorAll('img')].map(i => i.getAttribute('alt'))"
    )
    return [
        f"alt text {alt!r}"
        for alt in alts
        if alt is None
        or not alt.strip()
        or GENERIC_ALT.match(alt.strip())
        or FILE_NAME.search(alt.strip())
    ]


def text_problems(text: str) -> list[str]:
    found = []
    for name, pattern in (
        ("TeX", RAW_TEX),
        ("a Sphinx role", SPHINX_ROLE),
        ("process talk", PROCESS),
    ):
        for match in pattern.finditer(text):
            start = max(0, match.start() - 50)
            found.append(f"{name} shown as text: ...{text[start : match.end() + 50]}...")
    return found


@pytest.mark.parametrize("page", site_pages() or ["index.html"])
def test_every_page_reads_right(browser, site_url, page):
    """One page of the site as a learner meets it, at the review's 1366 x 900."""
    browser.set_window_size(1366, 900)
    open_and_check(browser, f"{site_url}/{page}", site_url, settle=0.3)
    problems = image_problems(browser) + formula_problems(browser)
    problems += text_problems(browser.execute_script(PROSE_JS))
    _found, _typeset, errors = rendered_math(browser)
    if errors:
        problems.append(f"{errors} formulas KaTeX could not typeset")
    assert problems == [], "\n".join(problems)


def test_the_page_walk_sees_every_page_of_both_languages():
    pages = site_pages()
    if not pages:
        pytest.skip(f"the site is not built ({SITE} has no pages): run python docs/build.py")
    english = {p for p in pages if not p.startswith("zh/")}
    chinese = {p.removeprefix("zh/") for p in pages if p.startswith("zh/")}
    assert len(english) > 30 and english == chinese, sorted(english ^ chinese)


def test_a_formula_too_wide_for_a_phone_scrolls_with_a_visible_bar(browser, site_url):
    """The checks above are not blind: on a phone's width the attention formulas of tutorial 1
    and of the functional reference are wider than the column, and each box scrolls with a
    scrollbar the page draws."""
    browser.set_window_size(360, 800)
    try:
        wide = []
        for page in ("tutorials/01-self-attention.html", "reference/functional.html"):
            open_and_check(browser, f"{site_url}/{page}", site_url)
            formulas = browser.execute_script(FORMULAS_JS)
            wide += [f for f in formulas if f["content"] > f["box"] + 1]
            assert formula_problems(browser) == [], page
        assert wide, "no formula is wider than a phone's column: the check sees nothing"
        assert all(f["styled"] and f["bar"] >= 4 and f["overflow"] == "auto" for f in wide), wide
    finally:
        browser.set_window_size(1366, 900)


def test_the_checks_catch_what_they_look_for():
    assert text_problems(r"Why divide by \(\sqrt{d_k}\)") and text_problems(r"\frac{a}{b}")
    assert text_problems("see :func:`qkv.attention`") and text_problems("as issue 12 asks")
    assert text_problems("the claim the issue expects") and not text_problems("an issue of scale")
    assert not text_problems("softmax(QKᵀ/√d_k)V, in a row")


def test_the_search_indexes_hold_formulas_as_text_and_one_language_each():
    index_path = SITE / "search" / "search_index.json"
    if not index_path.is_file():
        pytest.skip(f"the site is not built ({index_path} is missing): run python docs/build.py")
    english = json.loads(index_path.read_text(encoding="utf-8"))["docs"]
    chinese = json.loads((SITE / "zh" / "search" / "search_index.json").read_text("utf-8"))
    chinese = chinese["docs"]
    assert english and chinese
    assert not [d["location"] for d in english if d["location"].startswith("zh/")]
    assert any("注意力" in d["title"] for d in chinese)
    assert not any("手算" in d["title"] for d in english)
    for doc in english + chinese:
        assert not RAW_TEX.search(doc["title"]), doc["title"]
        assert "\\(" not in doc["text"] and "\\[" not in doc["text"], doc["location"]


def search(browser, site_url: str, page: str, query: str) -> list[str]:
    """Type ``query`` into the search box of ``page``; the result links, best first."""
    from selenium.webdriver.common.by import By

    open_and_check(browser, f"{site_url}/{page}", site_url)
    browser.execute_script(
        "document.querySelector('label.md-search__icon, label[for=__search]').click()"
    )
    field = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    field.send_keys(query)
    # the results follow each typed character: wait until they are those of the whole query
    # and have stopped changing
    deadline, last, steady_since = time.monotonic() + 20, None, time.monotonic()
    while time.monotonic() < deadline:
        links = browser.execute_script(
            "return [...document.querySelectorAll('.md-search-result__item > a')].map(a => a.href)"
        )
        if links != last:
            last, steady_since = links, time.monotonic()
        elif links and time.monotonic() - steady_since > 1.5:
            break
        # Material shows the results a page at a time, the next on scrolling: scroll
        browser.execute_script(
            "const wrap = document.querySelector('.md-search__scrollwrap');"
            "if (wrap) wrap.scrollTop = wrap.scrollHeight;"
        )
        time.sleep(0.1)
    return last or []


def test_search_on_an_english_page_finds_english_pages(browser, site_url):
    links = search(browser, site_url, "index.html", "attention")
    assert links and not any("/zh/" in link for link in links), links


def test_search_on_a_chinese_page_finds_words_inside_longer_ones(browser, site_url):
    """注意力 (attention) is a word inside 自注意力 (self-attention) and 多头注意力 (multi-head
    attention): the Chinese index is segmented into words, so a search for it finds the
    self-attention tutorial, and only Chinese pages; the multi-head tutorial's title is
    indexed as its two words.  (Material lists a page of results at a time: which pages
    past the first few are listed depends on the ranking, so the test asks for the first.)"""
    links = search(browser, site_url, "zh/index.html", "注意力")
    assert links and all("/zh/" in link for link in links), links
    found = {link.split("?")[0].rsplit("/", 1)[1] for link in links}
    assert "01-self-attention.html" in found, found
    index = json.loads((SITE / "zh" / "search" / "search_index.json").read_text("utf-8"))
    (title,) = [
        d["title"] for d in index["docs"] if d["location"] == "tutorials/02-multi-head.html"
    ]
    assert title.split("\u200b")[-2:] == ["多头", "注意力"], title
    links = search(browser, site_url, "zh/index.html", "多头")
    assert any("02-multi-head.html" in link for link in links), links


def test_the_404_page_speaks_each_language():
    english, chinese = SITE / "404.html", SITE / "zh" / "404.html"
    if not english.is_file():
        pytest.skip(f"the site is not built ({english} is missing): run python docs/build.py")
    assert '<html lang="en"' in english.read_text("utf-8")
    assert '<html lang="zh"' in chinese.read_text("utf-8")
