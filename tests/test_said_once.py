"""Rules that must be said in one place only: a second copy drifts.  Each test scans the
package's source for the rule written out again and names where."""

from __future__ import annotations

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "qkv"
NUMBER = re.compile(r"\d+(\.\d+)?")
COMPARISON = re.compile(r"([\w.\])]+)\s*(<=|>=|<|>)\s*([\w.\[(]+)")


def _python_lines():
    """(path, line number, code) of every line of code: comments and docstrings left out."""
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        prose = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                prose |= set(range(node.lineno, node.end_lineno + 1))
        for number, line in enumerate(text.splitlines(), 1):
            if number not in prose:
                yield path.relative_to(PACKAGE.parent), number, line.split("#")[0]


def _javascript_lines():
    for path in sorted((PACKAGE / "explore" / "script").rglob("*.js")):
        text = re.sub(
            r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), path.read_text(), flags=re.S
        )
        for number, line in enumerate(text.splitlines(), 1):
            yield path.relative_to(PACKAGE.parent), number, line.split("//")[0]


def window_comparisons_in_python() -> list[str]:
    """Lines that compare a distance with a window (not a check of the option's value)."""
    found = []
    for path, number, code in _python_lines():
        if "window" not in code.lower():
            continue
        for left, _, right in COMPARISON.findall(code):
            if "window" in (left + right).lower() and not (
                NUMBER.fullmatch(left) or NUMBER.fullmatch(right)
            ):
                found.append(f"{path}:{number}: {code.strip()}")
                break
    return found


def window_arithmetic_in_javascript() -> list[str]:
    """Lines that compute with a causal window (i - window + 1, ... < window)."""
    rule = re.compile(r"[+-]\s*[\w.]*\bwindow\b|(?<!=)[<>]=?\s*[\w.]*\bwindow\b|\bwindow\s*[<>+-]")
    return [
        f"{path}:{number}: {code.strip()}"
        for path, number, code in _javascript_lines()
        if rule.search(code.replace("window.", ""))
    ]


def test_the_window_rule_is_one_python_function():
    where = {line.split(":")[0] for line in window_comparisons_in_python()}
    assert where == {"qkv/functional/patterns.py"}, window_comparisons_in_python()


def test_the_window_rule_is_one_javascript_function():
    lines = window_arithmetic_in_javascript()
    assert len(lines) == 1 and lines[0].startswith("qkv/explore/script/compact.js"), lines
    assert "function keyRange" in (PACKAGE / "explore/script/compact.js").read_text()


def test_the_block_size_is_named_once():
    literal = re.compile(r"\b128\b")
    found = [
        f"{path}:{number}: {code.strip()}"
        for path, number, code in _python_lines()
        if literal.search(code) and "block" in code.lower()
    ]
    # the tile walk's threshold for cutting blocks in quarters is a tuning of its own
    tuning = "qkv/functional/backends/flex_plan.py:25: REFINE_BLOCK = 128"
    assert sorted(found) == sorted(
        ["qkv/functional/block_mask.py:52: DEFAULT_BLOCK_SIZE = 128", tuning]
    ), found


def test_the_scans_find_a_copy_of_the_rule():
    # the scans are not vacuous: the rule written out again is found
    copy = "    keep &= distance < window\n"
    assert COMPARISON.findall(copy.split("#")[0])
    js = re.compile(r"[+-]\s*[\w.]*\bwindow\b")
    assert js.search("first = Math.max(0, i - c.window + 1)")


#: Names a class stores a model's tokenizer under (a captioner's is its word vocabulary).
TOKENIZER_FIELDS = {"tokenizer", "vocab", "vocabulary"}
#: The classes that may hold a model beside a tokenizer, and why each is not a second
#: loaded model.
MODEL_AND_TOKENIZER = {
    "qkv/models/loaded.py:LoadedModel": "the one loaded model",
    "qkv/tasks/lm_start.py:LMStart": "a run's start: the tokenizer it trains with, and a "
    "model only when it starts from one (None: built from the setup)",
}


def _stored_names(node: ast.ClassDef) -> set[str]:
    """The attributes a class stores: its annotated fields (dataclass, NamedTuple; a field
    typed ``str`` names a kind, as a setup's ``model="transformer"``, and holds no object)
    and what its methods assign to ``self.NAME`` (one at a time or unpacked)."""
    names = {
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign)
        and isinstance(item.target, ast.Name)
        and not ast.unparse(item.annotation).startswith("str")
    }
    for method in node.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for inner in ast.walk(method):
            targets = []
            if isinstance(inner, ast.Assign):
                targets = inner.targets
            elif isinstance(inner, ast.AnnAssign):
                targets = [inner.target]
            for target in targets:
                for leaf in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(leaf, ast.Attribute)
                        and isinstance(leaf.value, ast.Name)
                        and leaf.value.id == "self"
                    ):
                        names.add(leaf.attr)
    return names


def loaded_model_shapes(root: pathlib.Path = PACKAGE) -> list[str]:
    """``path:Class`` of every class under ``root`` that stores a ``model`` beside a
    tokenizer: a loaded model's shape."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = _stored_names(node)
                if "model" in names and names & TOKENIZER_FIELDS:
                    found.append(f"{root.name}/{path.relative_to(root).as_posix()}:{node.name}")
    return found


def test_the_loaded_model_has_one_definition():
    shapes = loaded_model_shapes()
    assert sorted(shapes) == sorted(MODEL_AND_TOKENIZER), (
        "a class holding a model and its tokenizer besides qkv.models.LoadedModel: hold a "
        f"LoadedModel instead ({sorted(set(shapes) - set(MODEL_AND_TOKENIZER))})"
    )


def test_the_loaded_model_scan_finds_a_second_shape(tmp_path):
    # the scan is not vacuous: each way of storing the two is found
    package = tmp_path / "qkv"
    package.mkdir()
    (package / "runner.py").write_text(
        "from dataclasses import dataclass\n"
        "@dataclass\nclass Loaded:\n    model: object\n    tokenizer: object\n"
        "class Runner:\n    def __init__(self, model, vocab):\n"
        "        self.model, self.vocab = model, vocab\n"
        "class Holder:\n    def __init__(self, loaded):\n        self.loaded = loaded\n"
        "    @property\n    def model(self):\n        return self.loaded.model\n"
    )
    assert loaded_model_shapes(package) == ["qkv/runner.py:Loaded", "qkv/runner.py:Runner"]
