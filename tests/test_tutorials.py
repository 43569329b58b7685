"""Every tutorial's code runs, as the documentation build runs it (docs/hooks.py's
``run_page``: the site's Markdown configuration, markdown-exec executing each block), in a
fresh folder so that no model of an earlier run is reused.

The light pages (tensor arithmetic and timings: seconds) run in the plain test suite.  The
pages that train a model (minutes) are marked ``docs`` and left out of it (``-m "not docs"``
in pyproject.toml); ``python -m pytest -m docs`` runs them.  CI does not run those: its docs
step is ``python docs/build.py``, which runs every page's code the same way, in both
languages, and fails on a failing block, so running them here as well would train the same
models twice.

A tutorial's English and Chinese pages must hold the same code (the issue: same code,
translated prose): the build runs it once for both (docs/hooks.py, ``RunOnce``).
"""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("markdown_exec", reason="the docs extra is not installed")

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "docs" / "tutorials"
#: page -> a pattern that only its run's output matches (the shown source is highlighted:
#: its strings are cut into spans, so these do not match it)
LIGHT = {
    "01-self-attention": r"PyTorch equals ours:    True",
    "02-multi-head": r"projected W_O \(\d",
    "03-masks-positions": r"naive softmax, last row: tensor\(",
    "07-cost": r"chunked equals reference: True",
}
#: the pages that train a model
HEAVY = {
    "04-translation": r"2000 steps in \d+ s",
    "05-transformer": r"\d+ steps in \d+ s",
    "06-images": r"\d+ steps in \d+ s",
    "08-language-model": r"\d+ steps in \d+ s",
    "09-transformers": r"qkv made \d+\.\dx as many steps a second as sdpa",
}
CODE = re.compile(r'^```python exec="on"([^\n]*)\n(.*?)^```', re.MULTILINE | re.DOTALL)


def hooks():
    """docs/hooks.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("qkv_docs_hooks", TUTORIALS.parent / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_tutorial(page: Path, printed: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the pages keep their models under runs/tutorials/ here
    run = hooks().run_page(page, ROOT / "mkdocs.yml")
    assert run.failures == [], "\n\n".join(run.failures)
    assert re.search(printed, run.html), f"{page.name} did not print {printed!r}"


def test_a_failing_block_is_reported(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        '```python exec="on" session="x"\nprint("ran")\n```\n\n'
        '```python exec="on" session="x"\nraise ValueError("no such thing")\n```\n'
    )
    with pytest.raises(AssertionError, match="no such thing"):
        run_tutorial(page, "ran", tmp_path, monkeypatch)


def test_a_block_runs_once_for_both_languages():
    run_once, calls = hooks().RunOnce, []
    formatter = run_once(lambda source, *rest, **options: calls.append(source) or f"<{source}>")
    for _language in ("en", "zh"):
        run_once.positions.clear()  # what on_page_markdown does for each page
        shown = [formatter(code, "python", "", {"session": "t"}, None) for code in ("a", "b", "a")]
        assert shown == ["<a>", "<b>", "<a>"]
    assert calls == ["a", "b", "a"]  # the third block is a second block "a": it runs
    assert formatter("a", "python", "", {"session": ""}, None) == "<a>" and len(calls) == 4


def test_the_pages_are_the_ones_listed_here():
    pages = {p.stem for p in TUTORIALS.glob("0*.md") if not p.name.endswith(".zh.md")}
    assert pages == set(LIGHT) | set(HEAVY)


@pytest.mark.parametrize("name", sorted(LIGHT))
def test_a_light_tutorial_runs(name, tmp_path, monkeypatch):
    run_tutorial(TUTORIALS / f"{name}.md", LIGHT[name], tmp_path, monkeypatch)


@pytest.mark.docs
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_a_tutorial_that_trains_runs(name, tmp_path, monkeypatch):
    run_tutorial(TUTORIALS / f"{name}.md", HEAVY[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", sorted(LIGHT | HEAVY))
def test_both_languages_run_the_same_code(name):
    english = CODE.findall((TUTORIALS / f"{name}.md").read_text(encoding="utf-8"))
    chinese = CODE.findall((TUTORIALS / f"{name}.zh.md").read_text(encoding="utf-8"))
    assert english, f"{name} has no code that runs"
    assert chinese == english, f"{name}.zh.md's code (or its options) differs from {name}.md's"
