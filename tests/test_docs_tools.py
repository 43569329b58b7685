"""The documentation build's own tools (docs/hooks.py, docs/griffe_qkv.py), without building
the site: the command-line reference covers every command and option, each tutorial's
notebook holds the page's code and runs, search text has no TeX, the per-language search
indexes and pages, the reference entries for names a submodule shadows, and the links the
docstrings' Sphinx roles become."""

import argparse
import importlib.util
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TUTORIALS = DOCS / "tutorials"
CODE = re.compile(r'^```python exec="on"([^\n]*)\n(.*?)^```', re.MULTILINE | re.DOTALL)


def load(name: str):
    """A module of docs/ (not a package) by file name."""
    spec = importlib.util.spec_from_file_location(f"qkv_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hooks():
    return load("hooks")


def every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_the_cli_reference_has_every_command_and_every_option(hooks):
    from qkv.cli.main import build_parser

    page = hooks.cli_reference()
    parsers = list(every_parser(build_parser()))
    assert len(parsers) > 10
    for parser in parsers:
        anchor = parser.prog.replace(" ", "-")
        assert f"`{parser.prog}` {{ #{anchor} }}" in page, parser.prog
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page, (parser.prog, flag)


def test_the_cli_reference_escapes_table_cells(hooks):
    assert hooks._cell("a | b <c> *d*\n  e") == "a &#124; b &lt;c&gt; \\*d\\* e"


@pytest.mark.parametrize("page", sorted(p.name for p in TUTORIALS.glob("0*.md")))
def test_a_tutorial_notebook_holds_the_pages_code(hooks, page):
    markdown = (TUTORIALS / page).read_text(encoding="utf-8")
    language = "zh" if page.endswith(".zh.md") else "en"
    notebook = hooks.tutorial_notebook(markdown, language)
    assert notebook["nbformat"] == 4 and json.dumps(notebook)  # JSON as it is written
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    blocks = CODE.findall(markdown)
    assert len(code) == len(blocks)
    for (options, source), cell in zip(blocks, code):
        if "def show(" in source:  # the page's figure helper: the notebook's own
            assert cell == hooks.NOTEBOOK_HELPERS
            continue
        if 'html="1"' in options:  # run inside html_output(), indented one level
            head, _, body = cell.partition("\n")
            assert head == "with html_output():"
            cell = textwrap.dedent(body)
        assert cell.strip() == source.strip()
    markdown_text = "\n\n".join(
        "".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"
    )
    assert "\\(" not in markdown_text and "\\[" not in markdown_text
    assert markdown_text.startswith("# ")
    assert ("notebook" if language == "en" else "笔记本") in markdown_text.split("\n\n")[1]
    if not page.startswith("08-"):  # the exercises close the page and the notebook
        assert ("## Exercises" if language == "en" else "## 练习") in markdown_text
    ids = [c["id"] for c in notebook["cells"]]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("name", ["01-self-attention", "03-masks-positions"])
def test_a_tutorial_notebook_runs(hooks, name, tmp_path, monkeypatch):
    """The notebook's cells, run in order in one IPython shell, as Jupyter would."""
    shell_module = pytest.importorskip("IPython.core.interactiveshell")
    monkeypatch.chdir(tmp_path)
    markdown = (TUTORIALS / f"{name}.md").read_text(encoding="utf-8")
    shell = shell_module.InteractiveShell.instance()
    try:
        for cell in hooks.tutorial_notebook(markdown, "en")["cells"]:
            if cell["cell_type"] == "code":
                result = shell.run_cell("".join(cell["source"]), silent=True)
                assert result.success, result.error_in_exec or result.error_before_exec
    finally:
        shell_module.InteractiveShell.clear_instance()


def test_every_tutorial_page_links_its_notebook(hooks):
    for page in TUTORIALS.glob("0*.md"):
        src = f"tutorials/{page.name}"
        linked = hooks.notebook_link(page.read_text(encoding="utf-8"), src)
        assert f"notebooks/{hooks.notebook_name(src).rsplit('/', 1)[1]}" in linked


def test_search_text_has_no_tex(hooks):
    assert hooks.search_text(r"Why divide by \(\sqrt{d_k}\)") == "Why divide by √d_k"
    text = hooks.search_text(r"\[ \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V \]")
    assert text == "softmax ((QKᵀ)/(√d_k))V" and "\\" not in text
    assert hooks.search_text(r"cost \(O(n \cdot w)\)") == "cost O(n · w)"


def test_the_joint_search_index_splits_by_language(hooks, tmp_path):
    joint = {
        "config": {"lang": ["en", "zh"], "separator": "[\\s]+"},
        "docs": [
            {"location": "index.html", "title": "qkv", "text": r"\(x^2\)"},
            {"location": "zh/index.html", "title": "qkv", "text": "注意力"},
            {"location": "zh/tutorials/a.html#b", "title": "多头注意力", "text": ""},
        ],
    }
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "search_index.json").write_text(json.dumps(joint), "utf-8")
    hooks.split_search_index(tmp_path)
    english = json.loads((tmp_path / "search" / "search_index.json").read_text("utf-8"))
    chinese = json.loads((tmp_path / "zh" / "search" / "search_index.json").read_text("utf-8"))
    assert [d["location"] for d in english["docs"]] == ["index.html"]
    assert english["docs"][0]["text"] == "x^2" and english["config"]["lang"] == ["en"]
    assert [d["location"] for d in chinese["docs"]] == ["index.html", "tutorials/a.html#b"]
    assert chinese["config"]["lang"] == ["en", "zh"]


def test_a_chinese_page_searches_from_its_language_root(hooks):
    page = '<script id="__config" type="application/json">{"base": "../.."}</script>'
    assert '"base": ".."' in hooks.language_base(page, "zh/tutorials/a.html")
    assert '"base": "."' in hooks.language_base(page, "zh/index.html")
    assert hooks.language_base(page, "tutorials/a.html") == page


def test_exports_that_a_submodule_shadows_get_their_own_entry(hooks):
    assert ("attention", "qkv.functional.attention.attention") in hooks.shadowed_exports(
        "qkv.functional"
    )
    section = hooks.shadowed_sections("qkv.functional")
    assert "::: qkv.functional.attention.attention" in section
    assert "heading: qkv.functional.attention" in section
    assert hooks.shadowed_exports("qkv.layers") == []


def test_sphinx_roles_become_links_to_canonical_paths():
    griffe = pytest.importorskip("griffe")
    roles = load("griffe_qkv")
    package = griffe.load(
        "qkv",
        search_paths=[str(ROOT)],
        extensions=griffe.load_extensions(roles.SphinxRoles),
    )
    links = re.compile(r'<autoref identifier="([\w.]+)" optional><code>([^<]*)</code></autoref>')
    found, left = 0, []
    stack = [package]
    while stack:
        obj = stack.pop()
        if obj.docstring is not None:
            found += len(links.findall(obj.docstring.value))
            if roles.ROLE.search(obj.docstring.value):
                left.append(obj.path)
        stack.extend(member for member in obj.members.values() if not member.is_alias)
    assert left == [] and found > 200
    assert 'identifier="qkv.functional.attention.attention_with_weights"' in (
        package["functional.attention.attention"].docstring.value
    )


def test_a_role_resolves_as_python_would(hooks):
    griffe = pytest.importorskip("griffe")
    roles = load("griffe_qkv")
    package = griffe.load("qkv", search_paths=[str(ROOT)])
    masks = package["functional.masks"]
    found = roles.resolve(masks, package, "~qkv.layers.MultiHeadAttention".lstrip("~"))
    assert roles.canonical(found).startswith("qkv.layers.") and roles.canonical(found).endswith(
        "MultiHeadAttention"
    )
    assert roles.resolve(masks, package, "torch.topk") is None
    assert roles.canonical(package["functional"]) == "qkv.functional"


def test_a_tutorial_that_shows_an_examples_model_trains_it_with_the_examples_command():
    """The build trains such a model once, for the example, and copies the run into the
    tutorial's folder: the tutorial's own command (what a notebook runs) must be the
    example's, or the page would show another model than its code makes."""
    build = load("build")
    for name, folder in build.SHARED_RUNS.items():
        pages = [p for p in TUTORIALS.glob("*.md") if f"runs/tutorials/{folder}" in p.read_text()]
        assert len(pages) == 2, (name, pages)  # the English page and the Chinese one
        for page in pages:
            call = re.search(r"subprocess\.run\(\[(.*?)\]", page.read_text(), re.DOTALL)
            assert call, page
            words = re.findall(r'"([^"]*)"', call.group(1))
            expected = ["-m", "qkv.cli.main", "train", *build.EXAMPLES[name][0]]
            expected += ["--threads", "1", *build.LOG_RARELY, "--out"]
            assert words == expected, (page.name, words)


@pytest.mark.parametrize("suffix", [".md", ".zh.md"])
def test_each_example_page_shows_the_commands_the_build_runs(suffix):
    """An example's page says how its model was made: the commands it shows must be the
    ones docs/build.py runs (its training budget, its inputs and options), in both
    languages."""
    import shlex

    build = load("build")
    for name, (train, explore) in build.EXAMPLES.items():
        page = (DOCS / "examples" / f"{name}").with_suffix(suffix).read_text(encoding="utf-8")
        block = re.search(r"```bash\n(.*?)```", page, re.DOTALL).group(1).replace("\\\n", " ")
        lines = {}
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["qkv"]:
                lines[words[1]] = words[2:]
        if train is not None:
            shown = lines["train"]
            assert shown[-4:] == ["--out", "RUN", "--threads", "1"], (name, suffix, shown)
            assert shown[:-4] == train, (name, suffix, shown)
        shown = lines["explore"]
        at = shown.index("--out")
        assert at == len(shown) - 2, (name, suffix, shown)
        shown = shown[:at]
        if train is not None:
            assert shown[:2] == ["--checkpoint", "RUN"], (name, suffix, shown)
            shown = shown[2:]
        expected = []
        for word in explore:
            if word == "{scenes}":
                expected += ["scene-0.png", "scene-1.png", "scene-2.png"]
            else:
                expected.append("$MINILM" if word == "{minilm}" else word)
        assert arguments(shown) == arguments(expected), (name, suffix, shown)


def arguments(words: list[str]) -> tuple[list[str], list[tuple[str, ...]]]:
    """A command's words as (its inputs in order, its options in any order)."""
    inputs, options, rest = [], [], list(words)
    while rest:
        word = rest.pop(0)
        if not word.startswith("--"):
            inputs.append(word)
        elif word != "--live" and rest and not rest[0].startswith("--"):
            options.append((word, rest.pop(0)))
        else:
            options.append((word,))
    return inputs, sorted(options)


def test_every_page_has_a_chinese_twin_with_the_same_structure():
    """A Chinese page is the English one translated: every page but the API reference
    generated from English docstrings has one, with as many sections, tables, code blocks
    and figures (a table row glued to the next paragraph, or a section left out, shows up
    here as a count that differs)."""
    import markdown

    extensions = ["tables", "attr_list", "md_in_html", "admonition", "pymdownx.superfences"]
    generated = {"functional", "layers", "models", "decoding", "training", "pretrained"}
    generated |= {"explore", "families"}
    for english in sorted(DOCS.rglob("*.md")):
        if english.name.endswith(".zh.md"):
            continue
        if english.parent.name == "reference" and english.stem in generated:
            continue
        chinese = english.with_suffix(".zh.md")
        assert chinese.is_file(), f"{english.relative_to(DOCS)} has no Chinese page"
        if "--8<--" in english.read_text(encoding="utf-8"):
            continue  # the English page includes the README's text, the Chinese one writes it
        pages = [markdown.markdown(p.read_text(encoding="utf-8"), extensions=extensions)
                 for p in (english, chinese)]  # fmt: skip
        for tag in ("<h2", "<h3", "<table", "<pre", "<img"):
            counts = [page.count(tag) for page in pages]
            assert counts[0] == counts[1], (english.relative_to(DOCS), tag, counts)
