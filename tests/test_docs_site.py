"""The built documentation site in a real browser (Debian's chromium, headless, through
chromium-driver): a tutorial in both languages, a reference page and an embedded explorer
page are each drawn, log no console error, and request nothing from outside the site.

The site is what ``python docs/build.py`` wrote to site/ (.ci/run builds it, then runs this
module); without it the tests skip, saying so.  It is served from 127.0.0.1 by a server in
this process, and every other host is unreachable: the browser resolves no other name.
"""

import functools
import http.server
import json
import threading
import time
from pathlib import Path

import pytest

from .test_explore_browser import CHROMEDRIVER, CHROMIUM, FLAGS, _why_no_browser

pytestmark = pytest.mark.browser

SITE = Path(__file__).resolve().parent.parent / "site"
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
