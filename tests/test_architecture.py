"""The package's import arrows point one way (STYLE.md).  The picture below is the rule
itself: the test parses it.

    {functional, data} <- layers <- distributed <- models <- {training, decoding,
    evaluation, plotting, pretrained, integrations} <- explore <- tasks <- families <- cli

A package may import the packages to its left.  Among the packages in one pair of braces
none imports another.  There are two ground floors: ``functional`` (attention as functions
on tensors) and ``data`` (corpora, tokenizers and batches, plain Python and torch, which no
model needs); everything above may read both.
``distributed`` is math on tensors over torch.distributed (ring attention, sequence
sharding): it runs functional's kernels and sits below the models that call it.
``explore`` extracts every model's attention for the explorer page and ``qkv attention``.
``tasks`` builds whole jobs from every task package and ``pretrained``; ``families`` declares
each model family as one record over its jobs (qkv.families); ``cli`` parses and calls
``families`` and ``tasks``.  ``integrations`` plugs qkv's kernels into other libraries' interfaces
(transformers' attention backend) beside the task packages.  ``qkv.errors`` is plain Python under everything: any module may raise
its errors.  The core (functional, layers) depends on torch alone.
"""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "qkv"
PICTURE = " ".join(__doc__.split("\n\n")[1].split())
SHARED = {"errors"}  # plain modules any package may import
CORE_ALLOWED = {
    "torch",
    "math",
    "abc",
    "dataclasses",
    "typing",
    "collections",
    "functools",
    "__future__",
    "itertools",
    "warnings",
}


def levels(picture: str) -> dict[str, int]:
    """Package -> its position in a picture 'a <- b <- {c, d} <- e'."""
    result = {}
    for level, group in enumerate(picture.split("<-")):
        for name in re.findall(r"\w+", group):
            result[name] = level
    return result


LEVEL = levels(PICTURE)


def wrong_arrows(subpackage: str, imported: list[str], level: dict[str, int]) -> list[str]:
    """The imports of a module of ``subpackage`` that point the wrong way."""
    wrong = []
    for name in imported:
        parts = name.split(".")
        if parts[0] != "qkv" or len(parts) < 2 or parts[1] in SHARED:
            continue
        target = parts[1]
        if target in level and target != subpackage and level[target] >= level[subpackage]:
            wrong.append(f"{subpackage} (level {level[subpackage]}) imports {name}")
    return wrong


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) > 1:
            yield parts[0], path


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                name = ".".join(base + ((node.module,) if node.module else ()))
                if node.module is None:  # from . import x  /  from .. import x
                    for alias in node.names:
                        yield f"{name}.{alias.name}"
                    continue
                yield name
            else:
                yield node.module


def test_the_picture_places_every_subpackage_and_reads_as_stated():
    assert LEVEL["functional"] == LEVEL["data"] == 0
    assert LEVEL["functional"] < LEVEL["layers"] < LEVEL["models"]
    task_packages = {"training", "decoding", "evaluation", "plotting", "pretrained"}
    assert {LEVEL[name] for name in task_packages} == {LEVEL["models"] + 1}
    assert LEVEL["explore"] == LEVEL["models"] + 2
    assert LEVEL["tasks"] == LEVEL["explore"] + 1 and LEVEL["families"] == LEVEL["tasks"] + 1
    assert LEVEL["cli"] == LEVEL["families"] + 1
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert on_disk <= set(LEVEL), f"not in the picture: {sorted(on_disk - set(LEVEL))}"


@pytest.mark.parametrize(
    "subpackage, imported, wrong",
    [
        ("models", ["qkv.layers.multihead", "torch"], 0),
        ("models", ["qkv.cli.main"], 1),
        ("training", ["qkv.data.batch", "qkv.errors"], 0),
        ("training", ["qkv.decoding"], 1),  # task packages do not import each other
        ("data", ["qkv.training.config"], 1),  # data is a ground floor
        ("data", ["qkv.models.lm"], 1),
        ("data", ["qkv.functional.core"], 1),  # the two ground floors stand apart
        ("models", ["qkv.data.batch"], 0),
        ("tasks", ["qkv.pretrained.bert", "qkv.evaluation"], 0),
        ("pretrained", ["qkv.tasks"], 1),
        ("cli", ["qkv.tasks.translation", "qkv.layers"], 0),
    ],
)
def test_the_rule_catches_a_wrong_arrow(subpackage, imported, wrong):
    assert len(wrong_arrows(subpackage, imported, LEVEL)) == wrong


@pytest.mark.parametrize(
    "subpackage, path", list(_modules()), ids=lambda v: str(v).split("qkv/")[-1]
)
def test_imports_point_down(subpackage, path):
    assert subpackage in LEVEL, f"qkv/{subpackage} is not placed in the picture of STYLE.md"
    names = list(_imports(path))
    assert not wrong_arrows(subpackage, names, LEVEL), path.relative_to(PACKAGE.parent)
    if subpackage in ("functional", "layers"):
        outside = [n for n in names if n.split(".")[0] not in CORE_ALLOWED | {"qkv"}]
        assert not outside, f"{path.name}: the core may depend on torch alone, found {outside}"


def test_errors_module_imports_nothing_of_qkv():
    names = list(_imports(PACKAGE / "errors.py"))
    assert not [n for n in names if n.split(".")[0] == "qkv"]
