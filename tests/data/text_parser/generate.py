"""Regenerates the reference files written by the onnx package.

- <name>.pb: each <name>.txt parsed by onnx.parser. test_text_parser.cc parses the same
  texts with onnx-light and compares the messages, which pins our parser to upstream's.
- raw_initializers.onnx: a small model built with onnx.helper and numpy_helper, so its
  initializers are in raw_data as in exported models; test_text_printer.cc prints it.

Run with the project venv: .venv/bin/python tests/data/text_parser/generate.py
"""

import pathlib

import numpy as np
import onnx
import onnx.helper as helper
import onnx.numpy_helper as numpy_helper
import onnx.parser

HERE = pathlib.Path(__file__).resolve().parent

for text_file in sorted(HERE.glob("*.txt")):
    model = onnx.parser.parse_model(text_file.read_text())
    text_file.with_suffix(".pb").write_bytes(model.SerializeToString())
    print(f"{text_file.name}: onnx {onnx.__version__}, {model.ByteSize()} bytes")

graph = helper.make_graph(
    [
        helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
        helper.make_node("Cast", ["t"], ["y"], to=onnx.TensorProto.INT64),
        helper.make_node("Reshape", ["y", "B"], ["z"], allowzero=0),
        helper.make_node("Cast", ["H"], ["h32"], to=onnx.TensorProto.FLOAT),
    ],
    "real",
    [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 2])],
    [
        helper.make_tensor_value_info("z", onnx.TensorProto.INT64, None),
        helper.make_tensor_value_info("h32", onnx.TensorProto.FLOAT, [2]),
    ],
    [
        numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, "W"),
        numpy_helper.from_array(np.array([-1, 3], dtype=np.int64), "B"),
        numpy_helper.from_array(np.array([1.5, -2], dtype=np.float16), "H"),
    ],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
assert all(t.HasField("raw_data") for t in model.graph.initializer)
(HERE / "raw_initializers.onnx").write_bytes(model.SerializeToString())
print(f"raw_initializers.onnx: {model.ByteSize()} bytes")
