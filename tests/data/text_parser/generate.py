"""Regenerates the reference .pb files: each <name>.txt parsed by the onnx package's parser.

test_text_parser.cc parses the same texts with onnx-light and compares the messages, which
pins our parser to upstream's behaviour. Run with the project venv:
    .venv/bin/python tests/data/text_parser/generate.py
"""

import pathlib

import onnx
import onnx.parser

HERE = pathlib.Path(__file__).resolve().parent

for text_file in sorted(HERE.glob("*.txt")):
    model = onnx.parser.parse_model(text_file.read_text())
    text_file.with_suffix(".pb").write_bytes(model.SerializeToString())
    print(f"{text_file.name}: onnx {onnx.__version__}, {model.ByteSize()} bytes")
