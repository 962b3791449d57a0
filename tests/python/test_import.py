def test_native_module_imports():
    from onnx_light.onnx_py import _onnxpykernels
    assert hasattr(_onnxpykernels, "runtime")
