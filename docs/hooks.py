"""MkDocs hook: add what ``docs/build.py`` generates (KaTeX from npm, the explorer example
pages) to the site, so that nothing generated is ever committed under docs/.

The generated folder mirrors the site: ``build/docs/assets/katex/...`` becomes
``site/assets/katex/...``.  A missing folder fails the build and says what to run.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: What docs/build.py writes, relative to the folder holding mkdocs.yml.
GENERATED = Path("build") / "docs"
#: The generated parts the site needs, each a folder under GENERATED.
PARTS = ("assets/katex", "examples/pages")


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
