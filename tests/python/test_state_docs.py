"""Executes every Python code block of docs/persistent-state.md, in order, in one namespace."""
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "persistent-state.md"


def test_every_python_block_of_the_persistent_state_guide_runs():
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    namespace = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["completion"].cancelled


def test_every_cpp_block_is_part_of_the_built_example():
    text = DOC.read_text()
    example = (DOC.parent / "examples" / "persistent_state.cc").read_text()
    blocks = re.findall(r"```cpp\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2
    for block in blocks:
        for line in block.strip().splitlines():
            assert line.strip() in example, line
