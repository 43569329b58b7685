"""The code of the FlexAttention how-to page runs as written, block after block, and its
Chinese page holds the same code."""

import re
import warnings
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "flexattention.md"
CODE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_every_python_block_of_the_page_runs():
    blocks = CODE.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102
    assert namespace["config"].bias.grad is not None


def test_the_chinese_page_shows_the_same_code():
    chinese = PAGE.with_suffix(".zh.md").read_text(encoding="utf-8")
    assert CODE.findall(chinese) == CODE.findall(PAGE.read_text(encoding="utf-8"))
