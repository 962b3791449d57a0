"""Runs the onnx package's backend node tests for every operator onnx-light registers, each
twice: under a context whose default opsets are the model's, and under one whose defaults
differ (kernels must follow the model's opset_import, so results must not change).

tests/python/conformance_expected_failures.txt names each in-scope test that does not pass
yet, with the reason. The run fails when an unlisted test fails, and ALSO when a listed test
passes (remove it from the list: the list only shrinks). Regenerate reasons with
    python tests/python/test_onnx_conformance.py --write-expected
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import conformance
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

REGISTERED = {(d, op) for d, op in runtime.builtin_kernels()}


def in_scope_tests() -> list[str]:
    tests = []
    for test in conformance.all_tests():
        if conformance.model_ops(conformance.load_model(test)) <= REGISTERED:
            tests.append(test)
    return tests


IN_SCOPE = in_scope_tests()
EXPECTED = conformance.load_expected_failures()


def contexts(model) -> list:
    """A context whose default opsets are the model's, and one whose defaults differ from
    them: kernels must follow the model's opset_import, so both give the same results."""
    opset = {o.domain: o.version for o in model.opset_import}
    onnx_version = opset.get("", opset.get("ai.onnx", 18))
    other = runtime.default_opset(7 if onnx_version >= 13 else 21)
    return [runtime.RuntimeContext(runtime.KernelContext(opset)),
            runtime.RuntimeContext(runtime.KernelContext(other))]


def run_case(test: str) -> None:
    raw, model, cases = conformance.load_case(test)
    ours = ol_onnx.ModelProto.FromString(raw)
    session = runtime.RuntimeSession(ours)
    for context in contexts(model):
        for feeds, expected in cases:
            outputs = session.run(context, feeds)
            for name, want in expected.items():
                got = outputs[name]
                got = [_array(t) for t in got] if isinstance(got, list) else _array(got)
                conformance.assert_close(name, want, got)


def _array(tensor):
    """A NumPy view of a runtime tensor (numpy() also covers bfloat16 via ml_dtypes)."""
    return tensor.numpy() if hasattr(tensor, "numpy") else np.from_dlpack(tensor)


def test_the_expected_failure_list_names_only_in_scope_tests():
    stale = sorted(set(EXPECTED) - set(IN_SCOPE))
    assert not stale, f"listed tests that are no longer in scope or no longer exist: {stale}"


def test_a_meaningful_share_of_the_backend_suite_is_in_scope():
    assert len(IN_SCOPE) >= 100, f"only {len(IN_SCOPE)} backend node tests are in scope"


@pytest.mark.parametrize("test", IN_SCOPE)
def test_backend_node(test):
    if test in EXPECTED:
        try:
            run_case(test)
        except Exception:  # noqa: BLE001  -- still failing, as listed
            return
        pytest.fail(f"{test} now passes: remove it from conformance_expected_failures.txt")
    run_case(test)


def write_expected() -> None:
    lines = ["# In-scope ONNX backend node tests that do not pass yet: `test_name reason`.",
             "# The conformance run fails when one of these starts passing (remove it) or an",
             "# unlisted test fails. Regenerate: python tests/python/test_onnx_conformance.py --write-expected"]
    failures = 0
    for test in IN_SCOPE:
        try:
            run_case(test)
        except Exception as exc:  # noqa: BLE001
            failures += 1
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            lines.append(f"{test} {reason[:200]}")
    with open(conformance.EXPECTED_FAILURES, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(IN_SCOPE)} in scope, {failures} listed as failing")


if __name__ == "__main__":
    if "--write-expected" in sys.argv:
        write_expected()
