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
