"""The code of the FlexAttention how-to page runs as written, block after block."""

import re
import warnings
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "flexattention.md"


def test_every_python_block_of_the_page_runs():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 4
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in blocks:
            exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102
    assert namespace["config"].bias.grad is not None
