"""Nothing in qkv branches on a family's kind string outside the family's own modules: the
registered families (qkv.families) are the one place a model type is told apart.  A kind
string compared (``model_type == "lm"``, ``in ("rnn", ...)``) or used as a key of a dict
literal (``{"captioner": ...}``) is allowed only in a module that is its family's own
(``Family.modules``: found from what the record holds, written by nobody)."""

import ast
import dataclasses
import pathlib

import pytest

from qkv.explore import ExplorerAdapter
from qkv.families import families

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "qkv"


def _strings(node: ast.AST) -> list[str]:
    """The str constants of a node: itself, or the items of a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for item in node.elts for s in _strings(item)]
    return []


def kind_branches(source: str, kinds: set[str]) -> list[tuple[int, str]]:
    """(line, kind) of every comparison with a kind string and every dict literal keyed by
    one, in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [(node.lineno, s) for s in _strings(side) if s in kinds]
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    found += [(key.lineno, s) for s in _strings(key) if s in kinds]
        elif isinstance(node, ast.match_case):
            found += [
                (node.pattern.lineno, s)
                for s in _strings(getattr(node.pattern, "value", node.pattern))
                if s in kinds
            ]
    return found


def _module(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def offenders() -> list[str]:
    owner = {kind: family for family in families() for kind in family.model_types}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        for line, kind in kind_branches(path.read_text(encoding="utf-8"), set(owner)):
            if module not in owner[kind].modules:
                found.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} names {kind!r} "
                    f"(family {owner[kind].name!r})"
                )
    return found


def test_no_module_outside_a_family_branches_on_its_kind_strings():
    assert offenders() == []


@pytest.mark.parametrize(
    "source, count",
    [
        ('if model_type == "lm":\n    pass', 1),
        ('ok = kind != "captioner"', 1),
        ('ok = kind in ("rnn", "rnn-attention")', 2),
        ('SCORERS = {"transformer": score, "other": other}', 1),
        ('PRESETS = {("lm", "small"): preset}', 1),
        ('build_model("lm", config)', 0),  # a call names a type; it does not branch
        ('kind = "lm"', 0),
        ("if model_type == LM_MODEL:\n    pass", 0),
    ],
)
def test_the_check_sees_a_comparison_and_a_dict_keyed_by_a_kind(source, count):
    kinds = {"lm", "captioner", "rnn", "rnn-attention", "transformer"}
    assert len(kind_branches(source, kinds)) == count


SHARED = (
    "qkv.families.record",
    "qkv.tasks.task",
    "qkv.tasks.presets",
    "qkv.tasks.evaluate",
    "qkv.explore.registry",
    "qkv.training.recipes",
)


@pytest.mark.parametrize("family", families(), ids=lambda family: family.name)
def test_a_family_s_modules_are_those_its_record_reaches_and_no_shared_one(family):
    from qkv.models.registry import model_classes

    reached = {family.setup.__module__, family.score.__module__, family.view.__module__}
    reached |= {type(adapter).__module__ for adapter in family.explorers.values()}
    reached |= {c.__module__ for t in family.model_types for c in model_classes(t)}
    reached |= {family.spec.build.__module__, family.spec.datasets.__module__}
    assert reached <= family.modules
    assert not family.modules & set(SHARED)
    # every module of qkv found is a real one (as a typo in a hand-written list could not be)
    modules = {_module(path) for path in PACKAGE.rglob("*.py")}
    ours = {name for name in family.modules if name.split(".")[0] == "qkv"}
    assert ours <= modules, ours - modules


class _Elsewhere(ExplorerAdapter):
    """An adapter defined here, for a record that takes it."""

    kind, views = "lm", ("self",)

    def pages(self, model, inputs, request):
        return []


def test_what_a_record_holds_makes_its_modules_so_none_is_forgotten():
    lm = next(family for family in families() if family.name == "lm")
    moved = dataclasses.replace(lm, explorers={t: _Elsewhere() for t in lm.model_types})
    assert __name__ in moved.modules and "qkv.explore.language" not in moved.modules
    assert "qkv.explore.language" in lm.modules
