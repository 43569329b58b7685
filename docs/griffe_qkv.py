"""A griffe extension for the API reference (mkdocstrings loads it, see mkdocs.yml): the
Sphinx roles of qkv's docstrings become links.

qkv's docstrings name other objects the way Sphinx does, ``:func:`attention```,
``:class:`~qkv.layers.MultiHeadAttention```, ``:mod:`.chunked_kernel```, which ``help()``
shows well and Markdown shows as raw text.  Each role is resolved here as Python would
resolve the name in the docstring's scope (the object, its parents, then absolute and
relative module paths), and becomes a cross-reference to the object's canonical path
(``<autoref identifier="qkv.layers.attention.MultiHeadAttention" optional>``), which
mkdocs-autorefs links to wherever the object is documented (on the page of the reader's
language), or shows as inline code where it is not documented on its own (a module's
helper the reference lists under its module); ``~`` shows the last part of the name only,
as in Sphinx.  A name that is not one of qkv's public objects (a PyTorch function, a private
helper) becomes inline code.  The docstrings themselves are not changed.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:py:)?(func|class|meth|mod|attr|data|exc|obj):`([^`]+)`")


def _lookup(scope: griffe.Object, dotted: str):
    try:
        return scope[dotted]
    except (KeyError, ValueError, IndexError, griffe.AliasResolutionError):
        return None


def resolve(obj: griffe.Object, root: griffe.Module, target: str):
    """The object ``target`` names in ``obj``'s docstring, or None."""
    if target.startswith("."):  # relative to the package that holds the docstring's module
        module = obj.module
        package = module if module.is_init_module else module.parent
        dots = len(target) - len(target.lstrip("."))
        for _ in range(dots - 1):
            package = package.parent if package is not None else None
        return _lookup(package, target.lstrip(".")) if package is not None else None
    if target == root.name:
        return root
    if target.startswith(root.name + "."):
        return _lookup(root, target[len(root.name) + 1 :])
    scope = obj
    while scope is not None:  # the object itself (a method's class), then its parents
        found = _lookup(scope, target) if not scope.is_function else None
        if found is not None:
            return found
        scope = scope.parent
    return None


def canonical(found) -> str | None:
    """The canonical path of a resolved object when it is a public part of qkv."""
    try:
        path = found.final_target.path if found.is_alias else found.path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if any(part.startswith("_") and part != "__init__" for part in path.split(".")):
        return None
    return path


def link_roles(obj: griffe.Object, root: griffe.Module) -> None:
    if obj.docstring is None or ":`" not in obj.docstring.value:
        return

    def replace(role: re.Match) -> str:
        target = role.group(2).strip()
        short = target.startswith("~")
        target = target.lstrip("~").removesuffix("()")
        shown = target.lstrip(".").rsplit(".", 1)[-1] if short else target.lstrip(".")
        if role.group(1) in ("func", "meth"):
            shown += "()"
        found = resolve(obj, root, target)
        path = canonical(found) if found is not None else None
        if path is None:
            return f"`{shown}`"
        # an optional cross-reference: a link where the object is documented, its name as
        # code (with the path as its title) where it is not, never a failed build
        return f'<autoref identifier="{path}" optional><code>{html.escape(shown)}</code></autoref>'

    obj.docstring.value = ROLE.sub(replace, obj.docstring.value)


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            link_roles(obj, pkg)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
