"""Every ```python block in README.md and docs/*.md runs, so the documentation cannot drift
from the code. A page's blocks run in order in one namespace (later blocks continue earlier
ones, as a reader would type them), from the repository root."""
from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def page_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", open(page).read(), re.S)


@pytest.mark.parametrize("page", [p for p in PAGES if page_blocks(p)],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_documented_python_runs(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__doc_page__"}
    for i, code in enumerate(page_blocks(page)):
        exec(compile(code, f"{os.path.relpath(page, ROOT)} block {i}", "exec"), namespace)


def test_the_docs_have_python_examples():
    assert sum(len(page_blocks(p)) for p in PAGES) >= 3
