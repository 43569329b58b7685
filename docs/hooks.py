"""MkDocs hook: add what ``docs/build.py`` generates (KaTeX from npm, the explorer example
pages) to the site, so that nothing generated is ever committed under docs/; run each
tutorial's code once for both of its languages; list every module of a package on its
reference page.

The generated folder mirrors the site: ``build/docs/assets/katex/...`` becomes
``site/assets/katex/...``.  A missing folder fails the build and says what to run.

The tutorials' code blocks are run by markdown-exec (```` ```python exec="on" ````).  A
tutorial's English and Chinese pages hold the same code in the same session
(tests/test_tutorials.py checks it), so a block whose session, position in the page and code
have already run in this build is not run again: the Chinese page shows the output the
English page's run printed.  :func:`run_page` runs one page's code the same way outside a
build, for the tests.
"""

from __future__ import annotations

import html
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from mkdocs import plugins
from mkdocs.config import load_config
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: What docs/build.py writes, relative to the folder holding mkdocs.yml.
GENERATED = Path("build") / "docs"
#: The generated parts the site needs, each a folder under GENERATED.
PARTS = ("assets/katex", "examples/pages")


def on_config(config):
    """Wrap markdown-exec's Python fences so that each block runs once per build."""
    fences = config.mdx_configs.get("pymdownx.superfences", {}).get("custom_fences", [])
    for fence in fences:
        if fence["name"] in ("python", "py") and not isinstance(fence["format"], RunOnce):
            fence["format"] = RunOnce(fence["format"])
    return config


class RunOnce:
    """A markdown-exec formatter that runs a session's block only if the same block (session,
    position among the page's blocks of that session, code and options) has not run yet in
    this process, and otherwise returns the HTML of that run.  Blocks without a session
    always run."""

    #: (session, position, code, options) -> the HTML the block's run made
    ran: dict[tuple, str] = {}
    #: session -> blocks of it seen so far on the page being rendered
    positions: Counter = Counter()
    #: blocks not run again, their output taken from the run of the same block
    reused: int = 0

    def __init__(self, format_block):
        self.format_block = format_block

    def __call__(self, source, language, css_class, options, md, **kwargs):
        session = options.get("session")
        draft = os.environ.get("QKV_DOCS_DRAFT")  # docs/build.py --draft: the sessions to run
        if draft is not None and session not in draft.split(","):  # shown, not run
            shown = f'<pre><code class="language-python">{html.escape(source)}</code></pre>'
            return shown if options.get("source") else ""
        if not session:
            return self.format_block(source, language, css_class, options, md, **kwargs)
        key = (session, self.positions[session], source, repr(sorted(options.items())))
        self.positions[session] += 1
        if key in self.ran:
            RunOnce.reused += 1
        else:
            self.ran[key] = self.format_block(source, language, css_class, options, md, **kwargs)
        return self.ran[key]


#: A reference page's line ``<!-- modules of qkv.x -->`` becomes one section per public
#: module of the package (every ``.py`` file under it whose path has no part starting with
#: ``_``; a subpackage is its ``__init__.py``): the module's docstring, its names being
#: documented above it under the package, which exports them.
MODULES = re.compile(r"^<!-- modules of (qkv(?:\.\w+)*) -->$", re.MULTILINE)


def public_modules(package: str, root: Path) -> list[str]:
    """The dotted names of the public modules under ``package`` (itself excluded), sorted."""
    folder = root.joinpath(*package.split("."))
    names = []
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and not any(part.startswith("_") for part in parts):
            names.append(".".join((package, *parts)))
    return names


def module_sections(package: str, root: Path) -> str:
    return "\n".join(
        f"::: {name}\n    options:\n      members: false\n      heading_level: 3\n"
        for name in public_modules(package, root)
    )


#: ``::: qkv.x`` alone on a line: a package documented with the names it exports.
PACKAGE = re.compile(r"^::: (qkv(?:\.\w+)*)\n(?=\S|\n|$)", re.MULTILINE)


def shadowed_exports(package: str) -> list[tuple[str, str]]:
    """The names ``package`` exports that are also one of its submodules' names, as
    (name, the exported object's path): ``qkv.functional.attention`` is the function
    ``attention`` at run time, but the documentation's loader (griffe) takes the name for
    the submodule ``attention.py`` and documents no function under it."""
    import importlib
    import inspect

    module = importlib.import_module(package)
    folder = Path(module.__file__).parent
    found = []
    for name in getattr(module, "__all__", ()):
        value = getattr(module, name, None)
        if inspect.ismodule(value) or value is None:
            continue
        if (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file():
            found.append((name, f"{value.__module__}.{value.__qualname__}"))
    return found


def shadowed_sections(package: str) -> str:
    return "".join(
        f"\n::: {path}\n    options:\n      heading: {package}.{name}\n"
        f"      toc_label: {name}\n      heading_level: 3\n"
        for name, path in shadowed_exports(package)
    )


def on_page_markdown(markdown: str, page, config, files) -> str:
    RunOnce.positions.clear()  # positions count from each page's first block
    root = Path(config.config_file_path).parent
    markdown = CLI.sub(lambda _: cli_reference(), markdown)
    markdown = PACKAGE.sub(lambda line: line.group(0) + shadowed_sections(line.group(1)), markdown)
    markdown = notebook_link(markdown, page.file.src_uri)
    return MODULES.sub(lambda line: module_sections(line.group(1), root), markdown)


#: The language plugin builds every language into the same site folder, one after the
#: other, and leaves one search index for all of them and the last language's 404 page for
#: everyone.  Each language gets its own: the 404 page each build renders is kept here, and
#: when the last build is done they are written to their language's root, the joint search
#: index split in two.
NOT_FOUND: dict[str, str] = {}
#: The languages that are not the default, each at ``site/<code>/``.
OTHER_LANGUAGES = ("zh",)


def current_language(config) -> str:
    i18n = config.plugins.get("i18n")
    return getattr(i18n, "current_language", None) or "en"


def on_post_template(output: str, template_name: str, config) -> str:
    if template_name == "404.html":
        output = ALTERNATE.sub("", output)  # as on every page (on_post_page)
        NOT_FOUND[current_language(config)] = output
    return output


@plugins.event_priority(-200)  # after the language plugin's own (-100), which builds the rest
def on_post_build(config) -> None:
    i18n = config.plugins.get("i18n")
    if getattr(i18n, "building", False):
        return  # a language built from inside the first build's on_post_build: not done yet
    site = Path(config.site_dir)
    for language, page in NOT_FOUND.items():
        folder = site if language not in OTHER_LANGUAGES else site / language
        (folder / "404.html").write_text(page, encoding="utf-8")
    indexes = split_search_index(site)
    logging.getLogger("mkdocs.hooks").info(
        "search: one index per language (%s), formulas as text; 404 pages: %s",
        ", ".join(indexes),
        ", ".join(sorted(NOT_FOUND)),
    )
    logging.getLogger("mkdocs.hooks").info(
        "tutorial code: %d blocks run, %d shown again without running (the other language)",
        len(RunOnce.ran),
        RunOnce.reused,
    )


class PageRun(NamedTuple):
    """What running one page's code made: its HTML, and markdown-exec's report of each
    block that failed (empty when every block ran)."""

    html: str
    failures: list[str]


def run_page(path: str | Path, config_file: str | Path = "mkdocs.yml") -> PageRun:
    """Render one page with the site's Markdown configuration (``config_file``), running its
    code blocks as the build does; relative paths in the code are taken from the current
    directory.  The configuration loads its own copy of this hook, so nothing counts as run
    before the call."""
    import markdown

    config = load_config(str(config_file))
    config = config.plugins.on_config(config)  # markdown-exec's fences, wrapped by on_config
    failures: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                failures.append(record.getMessage())

    handler, root = Collect(), logging.getLogger()
    root.addHandler(handler)
    try:
        md = markdown.Markdown(
            extensions=config.markdown_extensions, extension_configs=config.mdx_configs
        )
        html = md.convert(Path(path).read_text(encoding="utf-8"))
    finally:
        root.removeHandler(handler)
    return PageRun(html, failures)


def on_files(files: Files, config) -> Files:
    add_notebooks(files, config)
    root = Path(config.config_file_path).parent / GENERATED
    for part in PARTS:
        folder = root / part
        if not folder.is_dir():
            raise PluginError(
                f"{folder} is missing: build the site with `python docs/build.py`, which "
                "installs KaTeX and makes the explorer pages before running mkdocs"
            )
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                files.append(
                    File(
                        path.relative_to(root).as_posix(),
                        src_dir=str(root),
                        dest_dir=config.site_dir,
                        use_directory_urls=config.use_directory_urls,
                    )
                )
    return files


#: ``[text](pages/NAME.html){ .qkv-embed }`` in a page: the explorer page it links to is
#: embedded in a frame above the link.  The frame takes the link's address as MkDocs (and
#: the language plugin, for the Chinese pages) resolved it, so it is right in every language.
EMBED = re.compile(r'<p><a class="qkv-embed" href="([^"]+)">')


def on_page_content(html: str, page, config, files) -> str:
    return EMBED.sub(
        lambda link: (
            f'<iframe class="qkv-explorer" src="{link.group(1)}" title="attention explorer">'
            f'</iframe>\n<p><a href="{link.group(1)}">'
        ),
        html,
    )


#: The language plugin links each page to its translation with ``<link rel="alternate">`` in
#: the head; Material's script then fetches ``sitemap.xml`` beside each such link, which
#: exists only at the language roots: a 404 in the console of every page.  The header's
#: language switch (``<a hreflang>``) does the switching, so the head links go.
ALTERNATE = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\n?')


def on_post_page(output: str, page, config) -> str:
    return language_base(ALTERNATE.sub("", output), page.file.dest_uri)


#: A page's line ``<!-- command-line reference -->`` becomes the reference of every ``qkv``
#: command, made from the parsers themselves (qkv.cli.main.build_parser), so that it always
#: says what the installed command accepts.
CLI = re.compile(r"^<!-- command-line reference -->$", re.MULTILINE)


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, its pipes and markup escaped."""
    text = " ".join(text.split())
    for char, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "&#124;")):
        text = text.replace(char, entity)
    return text.replace("*", "\\*").replace("_", "\\_").replace("`", "\\`")


def _wrapped(text: str, width: int = 88) -> str:
    """A parser's description as ``--help`` shows it on a terminal of ``width`` columns:
    prose paragraphs filled, indented lines (the examples) kept as written."""
    import textwrap

    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines = paragraph.splitlines()
        if any(line.startswith(" ") for line in lines):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(textwrap.fill(" ".join(lines), width))
    return "\n\n".join(paragraphs)


def _flags(action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    formatter_metavar = action.metavar or action.dest.upper()
    if isinstance(action.metavar, tuple):
        formatter_metavar = " ".join(action.metavar)
    takes_value = action.nargs != 0
    if action.choices is not None and action.metavar is None:
        formatter_metavar = "{" + ",".join(map(str, action.choices)) + "}"
    shown = [
        f"`{flag} {formatter_metavar}`" if takes_value else f"`{flag}`"
        for flag in action.option_strings
    ]
    return ", ".join(shown)


def cli_reference() -> str:
    """The Markdown reference of every command: one section per parser, its description and
    usage as the command prints them, and a table of its arguments per argument group."""
    import argparse

    from qkv.cli.main import build_parser

    sections: list[str] = []

    def describe(parser: argparse.ArgumentParser, level: int) -> None:
        formatter = parser._get_formatter()
        subcommands = []
        anchor = parser.prog.replace(" ", "-")
        sections.append(f"{'#' * level} `{parser.prog}` {{ #{anchor} }}\n")
        if parser.description:
            sections.append(f"```text\n{_wrapped(parser.description)}\n```\n")
        usage = formatter._format_usage(
            parser.usage, parser._actions, parser._mutually_exclusive_groups, "usage: "
        )
        sections.append(f"```text\n{usage.strip()}\n```\n")
        for group in parser._action_groups:
            rows = []
            for action in group._group_actions:
                if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                    continue
                if isinstance(action, argparse._SubParsersAction):
                    for choice in action._choices_actions:
                        sub = action.choices[choice.dest]
                        subcommands.append(sub)
                        link = f"[`{sub.prog}`](#{sub.prog.replace(' ', '-')})"
                        rows.append(f"| {link} | {_cell(choice.help or '')} |")
                    continue
                rows.append(
                    f"| {_flags(action)} | {_cell(formatter._expand_help(action) if action.help else '')} |"
                )
            if rows:
                title = group.title or "arguments"
                sections.append(f"**{title}**\n\n| argument | what it does |\n| --- | --- |")
                sections.append("\n".join(rows) + "\n")
        for sub in subcommands:
            describe(sub, min(level + 1, 4))

    describe(build_parser(), 2)
    return "\n".join(sections)


#: Search snippets are plain text: the index holds each formula as readable text, not TeX.
TEX_MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
TEX_SYMBOLS = {
    "sqrt": "√",
    "top": "ᵀ",
    "cdot": "·",
    "times": "×",
    "sum": "Σ",
    "prod": "Π",
    "exp": "exp",
    "log": "log",
    "max": "max",
    "min": "min",
    "infty": "∞",
    "approx": "≈",
    "leq": "≤",
    "le": "≤",
    "geq": "≥",
    "ge": "≥",
    "neq": "≠",
    "in": "∈",
    "to": "→",
    "rightarrow": "→",
    "leftarrow": "←",
    "ldots": "…",
    "dots": "…",
    "cdots": "⋯",
    "alpha": "α",
    "beta": "β",
    "gamma": "γ",
    "delta": "δ",
    "epsilon": "ε",
    "theta": "θ",
    "lambda": "λ",
    "mu": "μ",
    "pi": "π",
    "sigma": "σ",
    "tau": "τ",
    "phi": "φ",
    "omega": "ω",
    "Delta": "Δ",
    "Sigma": "Σ",
    "Omega": "Ω",
    "odot": "⊙",
    "otimes": "⊗",
    "oplus": "⊕",
    "mid": "|",
    "lVert": "‖",
    "rVert": "‖",
    "Vert": "‖",
    "pm": "±",
    "propto": "∝",
}


def tex_to_text(tex: str) -> str:
    """A formula's TeX as plain text for search snippets: ``\\sqrt{d_k}`` -> ``√d_k``,
    ``\\frac{a}{b}`` -> ``(a)/(b)``, spacing and sizing commands dropped."""
    text = re.sub(
        r"\\sqrt\{([^{}]*)\}",
        lambda root: "√" + (root[1] if re.fullmatch(r"\w+", root[1]) else f"({root[1]})"),
        tex,
    )
    for _ in range(4):  # nested fractions, innermost first
        text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(
        r"\\(?:mathrm|mathbf|mathit|operatorname|text|textrm|boldsymbol)\{([^{}]*)\}", r"\1", text
    )
    text = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)\b", "", text)
    text = re.sub(r"\\[,;:! ]|\\q?quad\b", " ", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda c: TEX_SYMBOLS.get(c.group(1), c.group(1)), text)
    text = text.replace("\\{", "{").replace("\\}", "}").replace("\\\\", " ")
    text = re.sub(r"\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\{([^{}]*)\}", r"\1", text)
    return " ".join(text.replace("^ᵀ", "ᵀ").split())


def search_text(text: str) -> str:
    return TEX_MATH.sub(lambda m: tex_to_text(m.group(1) or m.group(2)), text)


def split_search_index(site: Path) -> list[str]:
    """The joint search index as one index per language, each at its language's root
    (``site/search/``, ``site/zh/search/``) with locations relative to that root, and every
    formula as text.  Returns the languages written."""
    import json

    joint_path = site / "search" / "search_index.json"
    joint = json.loads(joint_path.read_text(encoding="utf-8"))
    written = []
    for language in ("en", *OTHER_LANGUAGES):
        prefix = "" if language == "en" else f"{language}/"
        docs = []
        for doc in joint["docs"]:
            location = doc["location"]
            mine = (
                location.startswith(prefix)
                if prefix
                else not any(location.startswith(f"{other}/") for other in OTHER_LANGUAGES)
            )
            if mine:
                doc = dict(doc, location=location[len(prefix) :])
                for field in ("title", "text"):
                    if field in doc:
                        doc[field] = search_text(doc[field])
                docs.append(doc)
        index = dict(joint, docs=docs)
        index["config"] = dict(joint["config"])
        if language == "en":
            index["config"]["lang"] = ["en"]
        folder = site / prefix / "search"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "search_index.json").write_text(
            json.dumps(index, ensure_ascii=False), encoding="utf-8"
        )
        written.append(f"{language}: {len(docs)} entries")
    return written


#: The page's configuration for Material's script; its ``base`` is where the search index is
#: fetched from (``base + "search/search_index.json"``) and search results are resolved.
MATERIAL_CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)')


def language_base(output: str, dest_uri: str) -> str:
    """A page of another language gets its language's root as its ``base``, so that it
    searches its own language's index."""
    import json
    import posixpath

    language = dest_uri.split("/", 1)[0]
    if language not in OTHER_LANGUAGES or "/" not in dest_uri:
        return output

    def rebase(match: re.Match) -> str:
        config = json.loads(match.group(2))
        config["base"] = posixpath.relpath(language, posixpath.dirname(dest_uri))
        return match.group(1) + json.dumps(config, ensure_ascii=False) + match.group(3)

    return MATERIAL_CONFIG.sub(rebase, output, count=1)


# ---------------------------------------------------------------------------------------
# Each tutorial as a Jupyter notebook, made from the page's own Markdown at build time.

#: A fenced block of the page: its info string and its code.
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$\n?", re.MULTILINE | re.DOTALL)
TUTORIAL = re.compile(r"^tutorials/(\d\d-[\w-]+?)(\.zh)?\.md$")

NOTEBOOK_INTRO = {
    "en": (
        "*This notebook is the tutorial page “{title}” of the qkv documentation, made from the "
        "same source the site runs when it is built. Run the cells in order after "
        '`pip install -e ".[docs]"` in a clone of qkv. On the site a figure is drawn into the '
        "page as a PNG; here `show` displays it instead, the only cell that differs.*"
    ),
    "zh": (
        "*本笔记本就是 qkv 文档中的教程页面“{title}”，由网站构建时运行的同一份源文件生成。在 qkv 的克隆目录中执行 "
        '`pip install -e ".[docs]"` 之后，按顺序运行各个单元格即可。网站上的图是以 PNG 形式嵌进页面的；'
        "这里改由 `show` 直接显示——这是唯一与网页不同的单元格。*"
    ),
}

#: The notebook's version of the pages' hidden figure helper, and of HTML output.
NOTEBOOK_HELPERS = '''# figures and HTML shown by the notebook itself (on the site they are put into the page)
import contextlib, io
import matplotlib.pyplot as plt
from IPython.display import HTML, display

def show(fig, alt=None):
    display(fig)
    plt.close(fig)

@contextlib.contextmanager
def html_output():
    """What the block prints is HTML: show it as HTML."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield
    display(HTML(buffer.getvalue()))'''


def _notebook_markdown(text: str) -> str:
    """Markdown of a page for Jupyter: its math delimiters, its links to other pages as
    links to their HTML."""
    text = re.sub(r"\\\[(.+?)\\\]", lambda m: f"$${m.group(1).strip()}$$", text, flags=re.DOTALL)
    text = re.sub(r"\\\((.+?)\\\)", lambda m: f"${m.group(1)}$", text, flags=re.DOTALL)
    return re.sub(r"\]\(([\w./-]+)\.md(#[\w-]+)?\)", r"](\1.html\2)", text)


def _notebook_cell(kind: str, text: str, number: int) -> dict:
    cell = {
        "cell_type": kind,
        "id": f"cell-{number}",
        "metadata": {},
        "source": text.strip("\n").splitlines(keepends=True),
    }
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def tutorial_notebook(markdown: str, language: str) -> dict:
    """The notebook (nbformat 4) of a tutorial page: its prose as Markdown cells, each
    executed block as a code cell (a block that prints HTML runs inside ``html_output()``),
    the hidden figure helper replaced by the notebook's own."""
    title = re.search(r"^# (.+)$", markdown, re.MULTILINE).group(1)
    cells: list[dict] = []
    position = 0
    helpers_added = False
    for fence in FENCE.finditer(markdown):
        info, code = fence.group(1), fence.group(2)
        prose = markdown[position : fence.start()]
        position = fence.end()
        if 'exec="on"' not in info:  # a block shown, not run: it stays in the prose
            cells.append(
                _notebook_cell("markdown", _notebook_markdown(prose) + fence.group(0), len(cells))
            )
            continue
        if prose.strip():
            cells.append(_notebook_cell("markdown", _notebook_markdown(prose), len(cells)))
        if "def show(" in code and "source=" not in info:  # the page's hidden figure helper
            code = NOTEBOOK_HELPERS
            helpers_added = True
        elif 'html="1"' in info:
            code = "with html_output():\n" + "".join(
                f"    {line}" if line.strip() else line for line in code.splitlines(True)
            )
        cells.append(_notebook_cell("code", code, len(cells)))
    if markdown[position:].strip():
        cells.append(
            _notebook_cell("markdown", _notebook_markdown(markdown[position:]), len(cells))
        )
    if not helpers_added:
        cells.insert(1, _notebook_cell("code", NOTEBOOK_HELPERS, len(cells)))
    # merge neighbouring Markdown cells (a shown-only block splits the prose)
    merged: list[dict] = []
    for cell in cells:
        if merged and cell["cell_type"] == merged[-1]["cell_type"] == "markdown":
            merged[-1]["source"] += ["\n", "\n"] + cell["source"]
        else:
            merged.append(cell)
    intro = _notebook_cell("markdown", NOTEBOOK_INTRO[language].format(title=title), 0)
    if merged and merged[0]["cell_type"] == "markdown" and merged[0]["source"][0].startswith("# "):
        title_line, *rest = merged[0]["source"]  # the intro goes under the title
        rest = ["\n", "\n", *rest] if rest else []
        merged[0]["source"] = [title_line.rstrip("\n") + "\n", "\n", *intro["source"], *rest]
    else:
        merged.insert(0, intro)
    for number, cell in enumerate(merged):
        cell["id"] = f"cell-{number}"
    return {
        "cells": merged,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def notebook_name(src_uri: str) -> str | None:
    """``tutorials/01-self-attention.zh.md`` -> ``tutorials/notebooks/01-self-attention.zh.ipynb``."""
    match = TUTORIAL.match(src_uri)
    if match is None:
        return None
    return f"tutorials/notebooks/{match.group(1)}{match.group(2) or ''}.ipynb"


def add_notebooks(files: Files, config) -> None:
    """Every tutorial's notebook, written under build/docs/notebooks (rewritten on every
    build, from the pages as they are) and added to the site beside its page."""
    import json

    docs = Path(config.docs_dir)
    root = Path(config.config_file_path).parent / GENERATED / "notebooks"
    for path in sorted((docs / "tutorials").glob("[0-9][0-9]-*.md")):
        src_uri = path.relative_to(docs).as_posix()
        name = notebook_name(src_uri)
        language = "zh" if src_uri.endswith(".zh.md") else "en"
        notebook = tutorial_notebook(path.read_text(encoding="utf-8"), language)
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook, ensure_ascii=False, indent=1) + "\n", "utf-8")
        files.append(
            File(
                name,
                src_dir=str(root),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )


NOTEBOOK_LINK = {
    "en": "*This page as a notebook: [{name}](notebooks/{name}) — the same code, to run and change yourself.*",
    "zh": "*本页的笔记本版本：[{name}](notebooks/{name})——代码相同，可以自己运行和修改。*",
}


def notebook_link(markdown: str, src_uri: str) -> str:
    """A tutorial's Markdown with the link to its notebook under its title."""
    name = notebook_name(src_uri)
    if name is None:
        return markdown
    language = "zh" if src_uri.endswith(".zh.md") else "en"
    link = NOTEBOOK_LINK[language].format(name=name.rsplit("/", 1)[1])
    return re.sub(
        r"^(# .+\n)",
        lambda title: f"{title.group(1)}\n{link}\n",
        markdown,
        count=1,
        flags=re.MULTILINE,
    )
