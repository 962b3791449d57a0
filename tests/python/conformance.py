"""Shared helpers for running the onnx package's backend node tests on onnx-light.

A backend node test is a folder onnx/backend/test/data/node/<test>/ with model.onnx and
test_data_set_*/input_*.pb, output_*.pb. A test is *in scope* when every operator of its
model (including subgraphs) has a built-in onnx-light kernel.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

NODE_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "conformance_expected_failures.txt")


def all_tests() -> list[str]:
    return sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(NODE_DATA, "*", "model.onnx")))


def model_ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    ops: set[tuple[str, str]] = set()
    local = {(f.domain, f.name) for f in model.functions}

    def walk(graph_nodes):
        for node in graph_nodes:
            domain = "" if node.domain == "ai.onnx" else node.domain
            if (node.domain, node.op_type) not in local:
                ops.add((domain, node.op_type))
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g.node)
                for g in attr.graphs:
                    walk(g.node)

    walk(model.graph.node)
    for f in model.functions:
        walk(f.node)
    return ops


def load_expected_failures() -> dict[str, str]:
    out = {}
    with open(EXPECTED_FAILURES) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def _read_value(path: str, type_proto):
    data = open(path, "rb").read()
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return [numpy_helper.to_array(t) for t in seq.tensor_values]
    if which == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        raise NotImplementedError("optional inputs are not supported by this runner")
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def load_case(test: str):
    """(model bytes, onnx model, [(inputs dict, expected outputs dict)])."""
    folder = os.path.join(NODE_DATA, test)
    raw = open(os.path.join(folder, "model.onnx"), "rb").read()
    model = onnx.load_from_string(raw)
    inputs_decl = [i for i in model.graph.input]
    outputs_decl = [o for o in model.graph.output]
    cases = []
    for ds in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
        feeds = {inputs_decl[i].name: _read_value(os.path.join(ds, f"input_{i}.pb"), inputs_decl[i].type)
                 for i in range(n_in)}
        expected = {outputs_decl[i].name: _read_value(os.path.join(ds, f"output_{i}.pb"), outputs_decl[i].type)
                    for i in range(n_out)}
        cases.append((feeds, expected))
    return raw, model, cases


def assert_close(name: str, expected, actual, rtol: float = 1e-3, atol: float = 1e-7) -> None:
    """The onnx backend runner's comparison: same dtype and shape, allclose(rtol, atol)."""
    if isinstance(expected, list):
        assert isinstance(actual, list), f"output '{name}': expected a sequence"
        assert len(actual) == len(expected), f"output '{name}': sequence length differs"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_close(f"{name}[{i}]", e, a, rtol, atol)
        return
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"output '{name}': dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"output '{name}': shape {actual.shape} != {expected.shape}"
    if expected.dtype == object or expected.dtype.kind in "SU":
        assert actual.tolist() == expected.tolist(), f"output '{name}' differs"
    elif expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=f"output '{name}'")
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"output '{name}'")
