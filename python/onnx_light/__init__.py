"""onnx-light: a C++20 runtime for ONNX models with persistent input/output feedback.

Subpackages: ``onnx_light.onnx`` (protos, model I/O), ``onnx_light.onnx_lib`` (text
parser and printer), ``onnx_light.onnx_py._onnxpykernels.runtime`` (the native runtime).
"""
from onnx_light.onnx_py import _onnxpykernels as _native

# Raised when a TaskCompletion cancels a call (a RuntimeError).
CancelledError = _native.runtime.CancelledError
# Raised for malformed ONNX text (a ValueError with .line and .column, 1-based).
ParseError = _native.ParseError

__all__ = ["CancelledError", "ParseError"]
