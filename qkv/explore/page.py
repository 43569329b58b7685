"""The explorer page: the data of :func:`qkv.explore.explore` and the page's script and
styles, all inline in one HTML string that opens from disk and makes no network request."""

from __future__ import annotations

import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from qkv.errors import InputError

from .build import FORMAT
from .wasm import matmat_base64

__all__ = ["render_html", "iframe_html", "write_html", "check_page_path"]


#: The page's script, in the order its parts are defined; script/kinds.js reads what the
#: page shows for its kind of model from the data (registry.PageKind).  They share one
#: scope: inlined together inside one function.
SCRIPT = (
    "kinds.js",
    "data.js",
    "compact.js",
    "panels.js",
    "grid.js",
    "pictures.js",
    "neuron.js",
    "export.js",
    "main.js",
)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


#: A live page's script after the page's own (qkv.explore.live): the shared math, the
#: family's forward pass (``live/<family>.js``), then the live bar.
LIVE_SCRIPT = ("live/common.js", "live/{family}.js", "live/page.js")


def _script(live: str | None = None) -> str:
    if live is not None and (
        not str(live).isidentifier()
        or not resources.files(__package__).joinpath(f"script/live/{live}.js").is_file()
    ):
        raise InputError(f"the page has no live forward pass for {live!r}")
    names = [*SCRIPT, *(name.format(family=live) for name in LIVE_SCRIPT)] if live else SCRIPT
    parts = [_asset(f"script/{name}") for name in names]
    script = '(function () {\n"use strict";\n' + "\n".join(parts) + "})();\n"
    return script.replace("__WASM_MATMAT__", matmat_base64(), 1) if live else script


def render_html(data: dict[str, Any], *, title: str | None = None) -> str:
    """The whole page for ``data`` (from :func:`qkv.explore.explore`), as one string."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not data.get("inputs"):
        raise InputError("render_html takes the dict that qkv.explore.explore returns")
    # Inside <script>, "</" could close the element early: JSON allows "<" written as \u003c.
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c")
    title = title or f"qkv attention explorer: {data['model']['kind']}"
    page = _asset("page.html")
    for key, value in (
        ("__TITLE__", html.escape(title)),
        ("__CSS__", _asset("page.css")),
        ("__JS__", _script(data["live"]["family"] if data.get("live") else None)),
        ("__DATA__", payload),
    ):
        page = page.replace(key, value, 1)
    return page


def iframe_html(data: dict[str, Any], *, height: int = 900) -> str:
    """The page inside an ``<iframe srcdoc>``, for a notebook cell:
    ``IPython.display.HTML(iframe_html(data))``.  The frame keeps the page's script and
    styles apart from the notebook's, so several explorers can share one notebook."""
    return (
        f'<iframe srcdoc="{html.escape(render_html(data), quote=True)}" '
        f'style="width: 100%; height: {int(height)}px; border: 0"></iframe>'
    )


def check_page_path(path: str | Path) -> Path:
    """Refuse, before any work, a destination that is not an .html file in a folder."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"the page goes to an .html file, not {str(path)!r}")
    if not path.parent.is_dir():
        raise InputError(f"the folder {str(path.parent)!r} does not exist; create it first")
    return path


def write_html(data: dict[str, Any], path: str | Path) -> Path:
    """Write the page to ``path`` (UTF-8); returns the path."""
    path = check_page_path(path)
    path.write_text(render_html(data), encoding="utf-8")
    return path
