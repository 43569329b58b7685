"""Every public name of the packages the API reference covers has a docstring: each name
in a package's ``__all__`` that is a class or a function, each public method and property
of those classes, and each public module of the packages.

A dataclass without a docstring has one made up from its signature (``Name(a: int, ...)``):
that counts as none.  ``extra_repr`` is exempt (torch's hook for ``repr(module)``, whose
meaning torch documents)."""

import importlib
import inspect
import pkgutil

import pytest

#: The packages docs/reference/ documents, one page each.
REFERENCE = [
    "qkv.functional",
    "qkv.layers",
    "qkv.models",
    "qkv.decoding",
    "qkv.training",
    "qkv.pretrained",
    "qkv.explore",
    "qkv.families",
]
EXEMPT_METHODS = {"extra_repr"}


def has_docstring(obj) -> bool:
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc or not doc.strip():
        return False
    generated = inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(")
    return not generated


def public_methods(cls) -> dict[str, object]:
    """The functions and properties ``cls`` itself defines (not inherited), by name."""
    found = {}
    for name, member in vars(cls).items():
        if name.startswith("_") or name in EXEMPT_METHODS:
            continue
        if isinstance(member, property):
            member = member.fget
        member = getattr(member, "__func__", member)  # classmethod, staticmethod
        if inspect.isfunction(member):
            found[name] = member
    return found


def undocumented(package_name: str) -> list[str]:
    package = importlib.import_module(package_name)
    missing = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            module = importlib.import_module(f"{package_name}.{info.name}")
            if not (module.__doc__ or "").strip():
                missing.append(f"module {module.__name__}")
    for name in package.__all__:
        obj = getattr(package, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants are described where they are defined
        if not has_docstring(obj):
            missing.append(f"{package_name}.{name}")
        if inspect.isclass(obj):
            for method, function in public_methods(obj).items():
                if not (function.__doc__ or "").strip():
                    missing.append(f"{package_name}.{name}.{method}")
    return missing


@pytest.mark.parametrize("package_name", REFERENCE)
def test_every_public_name_has_a_docstring(package_name):
    assert undocumented(package_name) == []


def test_the_check_sees_a_missing_docstring():
    class Documented:
        """Here."""

        def method(self):
            """Also here."""

        def bare(self):
            pass

    assert has_docstring(Documented)
    assert list(public_methods(Documented)) == ["method", "bare"]
    assert not Documented.bare.__doc__

    import dataclasses

    @dataclasses.dataclass
    class Generated:
        x: int

    assert not has_docstring(Generated)
