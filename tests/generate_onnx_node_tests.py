"""Writes the official ONNX backend node tests in their standard layout
(<out>/<test>/model.onnx, test_data_set_N/input_K.pb, output_K.pb).

Recent onnx wheels ship the node test *generators* (onnx.backend.test.case.node) rather
than the generated data folder; this runs them, exactly as onnx's own data generation does.
A stamp with the onnx version makes a second run free.

    python tests/generate_onnx_node_tests.py [OUT]

OUT defaults to the onnx package's own onnx/backend/test/data/node, where older wheels
shipped these files, so every consumer finds them at the standard path.
"""
from __future__ import annotations

import os
import shutil
import sys
import warnings


def main(out: str) -> int:
    import onnx
    from onnx import numpy_helper

    stamp = os.path.join(out, f".generated-onnx-{onnx.__version__}")
    if os.path.exists(stamp):
        return 0
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test.case.node as node_cases

        cases = node_cases.collect_testcases()

    def serialize(value, type_proto, name):
        if isinstance(value, onnx.TensorProto):
            return value.SerializeToString()
        if type_proto.HasField("sequence_type"):
            return numpy_helper.from_list(value, name).SerializeToString()
        if type_proto.HasField("optional_type"):
            return numpy_helper.from_optional(value, name).SerializeToString()
        if type_proto.HasField("map_type"):
            return numpy_helper.from_dict(value, name).SerializeToString()
        return numpy_helper.from_array(value, name).SerializeToString()

    for case in cases:
        folder = os.path.join(out, case.name)
        os.makedirs(folder)
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(folder, f"test_data_set_{i}")
            os.makedirs(ds)
            for kind, values, decls in (("input", inputs, case.model.graph.input),
                                        ("output", outputs, case.model.graph.output)):
                for j, value in enumerate(values):
                    with open(os.path.join(ds, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(serialize(value, decls[j].type, decls[j].name))
    open(stamp, "w").close()
    print(f"wrote {len(cases)} ONNX backend node tests to {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = sys.argv[1]
    else:
        import onnx

        target = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    sys.exit(main(target))
