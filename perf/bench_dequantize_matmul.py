"""MatMul of a blocked int4 DequantizeLinear weight (standard ONNX weight-only quantization,
block 32, with zero points), one row (decode), in onnx-light (ai.onnx_light.fused::
DequantizeMatMul, float arithmetic, and with dequantize_matmul_accuracy_level=4: int8
activations) and onnxruntime (which rewrites the pair to MatMulNBits with int8 activations),
2 threads, medians of 100 calls, two rounds.

    PYTHONPATH=python:tests/python .venv/bin/python perf/bench_dequantize_matmul.py
"""
import sys, time, numpy as np
sys.path.insert(0, "tests/python")
import test_dequantize_matmul as t
import onnxruntime as ort
from onnx_light.onnx_py._onnxpykernels import runtime
for k, n in ((896, 4864), (576, 49152)):
    data, feeds = t.build("int4", k=k, n=n, block=32, m=1)
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    s_ort = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    s_ol = runtime.RuntimeSession(data)
    s_q8 = runtime.RuntimeSession(data, runtime.RuntimeSessionOptions(
        dequantize_matmul_accuracy_level=4))
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    def med(f, n=100):
        for _ in range(5): f()
        ts = []
        for _ in range(n):
            a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
        return np.median(ts) * 1e6
    for r in range(2):
        ol = med(lambda: s_ol.run(ctx, feeds)); ot = med(lambda: s_ort.run(["y"], feeds))
        q8 = med(lambda: s_q8.run(ctx, feeds))
        print(f"DQ int4 block 32 K={k} N={n}, M=1: onnx-light float {ol:.0f} us ({ol/ot:.2f}x), "
              f"int8 activations {q8:.0f} us ({q8/ot:.2f}x), onnxruntime {ot:.0f} us")
