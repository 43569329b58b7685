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

import logging
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

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


def on_page_markdown(markdown: str, page, config, files) -> str:
    RunOnce.positions.clear()  # positions count from each page's first block
    root = Path(config.config_file_path).parent
    return MODULES.sub(lambda line: module_sections(line.group(1), root), markdown)


def on_post_build(config) -> None:
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
    return ALTERNATE.sub("", output)
