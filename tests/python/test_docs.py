"""Every ```python block in README.md and docs/*.md runs, so the documentation cannot drift
from the code. Blocks run in a fresh namespace each, from the repository root."""
from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def blocks():
    for page in PAGES:
        text = open(page).read()
        for i, match in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            yield pytest.param(match.group(1), id=f"{os.path.relpath(page, ROOT)}#{i}")


@pytest.mark.parametrize("code", list(blocks()))
def test_documented_python_runs(code, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, "<doc block>", "exec"), {"__name__": "__doc_block__"})


def test_the_docs_have_python_examples():
    assert len(list(blocks())) >= 3
