"""One com.microsoft GroupQueryAttention decode call (one query, 1024 cached tokens, the
SmolLM2-135M and Qwen2.5-0.5B head layouts, head size 64) in onnx-light and onnxruntime, 2
threads, medians of 200 calls, two rounds; the past is fed (not bound), so both copy it into
the present.

    PYTHONPATH=python:tests/python .venv/bin/python perf/bench_gqa_decode.py
"""
import sys, time, numpy as np
sys.path.insert(0, "tests/python")
import test_contrib_ops as t
import onnxruntime as ort
from onnx_light.onnx_py._onnxpykernels import runtime
rng = np.random.default_rng(0)
for nq, nkv in ((9, 3), (14, 2)):
    model, feeds = t._gqa(rng, seq=1, past=1024, nq=nq, nkv=nkv, h=64)
    names = [o.name for o in model.graph.output]
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    s_ort = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    session = runtime.RuntimeSession(model)
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    def best(f, n=200):
        for _ in range(10): f()
        ts = []
        for _ in range(n):
            a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
        return np.median(ts) * 1e6
    for r in range(2):
        ol = best(lambda: session.run(ctx, feeds, output_names=["out"]))
        ot = best(lambda: s_ort.run(["out"], feeds))
        print(f"{nq}/{nkv} heads, past 1024: onnx-light {ol:.0f} us, onnxruntime {ot:.0f} us, ratio {ol/ot:.2f}")
