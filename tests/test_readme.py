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


def test_the_readme_benchmark_finds_a_bar_for_every_translation_and_scene_command():
    """``benchmarks.readme_commands`` runs the README's training lines and holds each to a
    bar; a line it cannot score must say so rather than be run and misread."""
    from benchmarks.readme_commands import readme_commands

    commands = [c for c in readme_commands(README) if c.words[0] == "qkv"]  # not torchrun
    by_data = {(c.task, c.data): c for c in commands}
    for key in [("translation", "dates"), ("translation", "ding-de-en"), ("captioning", "shapes")]:
        assert key in by_data and by_data[key].skip_reason is None, key
    for command in commands:
        assert (command.bar is None) == (command.skip_reason is not None), command.text
        if command.task not in ("translation", "captioning"):
            assert command.skip_reason is not None, command.text
