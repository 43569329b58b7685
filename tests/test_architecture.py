"""The package's import arrows point one way (STYLE.md):

functional <- layers <- models <- {data, training, decoding, evaluation, plotting, pretrained}
<- tasks <- cli.  Among the task packages, data comes first (training reads batches and
tokenizers); the others do not import each other.  The core (functional, layers) depends on torch alone.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "qkv"
LEVEL = {
    "functional": 0,
    "layers": 1,
    "models": 2,
    "data": 3,
    "training": 4,
    "decoding": 4,
    "evaluation": 4,
    "plotting": 4,
    "pretrained": 4,
    "explore": 4.5,  # reads models, data, decoding; tasks (qkv attention) and cli import it
    "tasks": 5,
    "cli": 6,
}
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


@pytest.mark.parametrize(
    "subpackage, path", list(_modules()), ids=lambda v: str(v).split("qkv/")[-1]
)
def test_imports_point_down(subpackage, path):
    assert subpackage in LEVEL, f"qkv/{subpackage} is not placed in the layering of STYLE.md"
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "qkv" and len(parts) > 1 and parts[1] == "errors":
            continue  # qkv.errors is plain Python below everything: any module may raise them
        if parts[0] == "qkv" and len(parts) > 1 and parts[1] in LEVEL:
            target = parts[1]
            assert target == subpackage or LEVEL[target] < LEVEL[subpackage], (
                f"{path.relative_to(PACKAGE.parent)} imports qkv.{target}: "
                f"{subpackage} (level {LEVEL[subpackage]}) may not depend on {target} (level {LEVEL[target]})"
            )
        if subpackage in ("functional", "layers") and parts[0] != "qkv":
            assert parts[0] in CORE_ALLOWED, (
                f"{path.name}: the core may depend on torch alone, found {name}"
            )
