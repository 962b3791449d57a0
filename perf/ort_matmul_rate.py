"""onnxruntime's MatMul rate (GFLOP/s, one thread, CPU time, best of 20) on the real-size
decoders' prompt products, a constant weight per one-node model: the figure to hold
`./build/perf/bench_matmul --benchmark_filter=OneThread` against, in the same minute.

    .venv/bin/python perf/ort_matmul_rate.py
"""
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SHAPES = [(128, 576, 960), (128, 576, 576), (128, 576, 3072), (128, 1536, 576),
          (128, 576, 8192), (128, 896, 9728), (128, 4864, 896)]


def rate(m: int, k: int, n: int) -> float:
    w = np.random.default_rng(0).random((k, n), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).random((m, k), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    best = float("inf")
    for _ in range(20):
        t0 = time.process_time()
        session.run(None, {"x": x})
        best = min(best, time.process_time() - t0)
    return 2 * m * k * n / max(best, 1e-9) / 1e9


if __name__ == "__main__":
    for m, k, n in SHAPES:
        print(f"{m}x{k}x{n}: onnxruntime 1 thread {rate(m, k, n):.1f} GFLOP/s")
