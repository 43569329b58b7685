"""The README's Python examples run as written."""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)  # noqa: S102
    assert namespace["z"].shape == (2, 4, 5, 16)
    assert namespace["y_t"].shape == (2, 1, 512)


def test_readme_quick_start_has_exactly_two_commands():
    text = README.read_text(encoding="utf-8")
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", quick_start, re.S)
    assert len(commands) == 2
    assert "qkv demo" in commands[0] and "pytest" in commands[1]
    assert all(c.startswith("pip install torch==2.13.0") for c in commands)
