"""CTest names come from doctest's TEST_CASE names through a CMake list, so a ';' would split
one case into pieces whose filters match nothing (and pass without running)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_no_cpp_test_case_name_contains_a_semicolon():
    offenders = []
    for path in sorted((ROOT / "tests" / "cpp").rglob("*.cc")):
        for match in re.finditer(r'TEST_CASE\(((?:\s*"[^"]*")+)\s*\)', path.read_text()):
            name = "".join(re.findall(r'"([^"]*)"', match.group(1)))
            if ";" in name:
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []
