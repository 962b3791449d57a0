"""One com.microsoft GroupQueryAttention decode call (one query, 1024 cached tokens, the
SmolLM2-135M and Qwen2.5-0.5B head layouts, head size 64) in onnx-light and onnxruntime, FLOAT
and FLOAT16 (16-bit caches read in place), 2 threads, medians of 200 calls, two rounds; the
past is fed (not bound), so both copy it into the present. Then onnx-light with the caches
bound (persistent state, appended in place): steps from 1024 to 1234 cached tokens.

    PYTHONPATH=python:tests/python .venv/bin/python perf/bench_gqa_decode.py
"""
import sys, time, numpy as np
sys.path.insert(0, "tests/python")
import test_contrib_ops as t
import onnxruntime as ort
from onnx_light.onnx_py._onnxpykernels import runtime


def best(f, n=200):
    for _ in range(10): f()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return np.median(ts) * 1e6


for nq, nkv in ((9, 3), (14, 2)):
    runs = {}
    for dtype in (np.float32, np.float16):
        model, feeds = t._gqa(np.random.default_rng(0), seq=1, past=1024, nq=nq, nkv=nkv, h=64,
                              dtype=dtype)
        so = ort.SessionOptions(); so.intra_op_num_threads = 2
        s_ort = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        session = runtime.RuntimeSession(model)
        ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
        runs[np.dtype(dtype).name] = (lambda s=session, c=ctx, f=feeds: s.run(c, f, output_names=["out"]),
                                      lambda s=s_ort, f=feeds: s.run(["out"], f))
    for r in range(2):
        us = {(d, who): best(fn) for d, fns in runs.items() for who, fn in zip(("ol", "ort"), fns)}
        print(f"{nq}/{nkv} heads, past 1024: FLOAT onnx-light {us['float32', 'ol']:.0f} us, "
              f"onnxruntime {us['float32', 'ort']:.0f} us; FLOAT16 onnx-light {us['float16', 'ol']:.0f} us, "
              f"onnxruntime {us['float16', 'ort']:.0f} us; FLOAT16/FLOAT onnx-light "
              f"{us['float16', 'ol'] / us['float32', 'ol']:.2f}, FLOAT16 onnx-light/onnxruntime "
              f"{us['float16', 'ol'] / us['float16', 'ort']:.2f}")


def bound_steps(nq, nkv, dtype, steps=200):
    """Median decode step with the caches bound, starting from 1024 cached tokens."""
    from onnx_light import onnx as ol_onnx
    model, feeds = t._gqa(np.random.default_rng(0), seq=1, past=1024, nq=nq, nkv=nkv, h=64,
                          dtype=dtype)
    ours = ol_onnx.from_onnx(model)
    for name in ("key", "value"):
        b = ours.graph.persistent_bindings.add()
        b.input_name, b.output_name = f"past_{name}", f"present_{name}"
    initial = {"past_key": feeds.pop("past_key"), "past_value": feeds.pop("past_value")}
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=1024 + steps + 20)
    state = runtime.PersistentValueState(ours, initial, options=options)
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    step_feeds = [{**feeds, "seqlens_k": np.array([1024 + i], np.int32),
                   "total_sequence_length": np.array(1025 + i, np.int32)} for i in range(steps + 10)]
    ts = []
    for i, f in enumerate(step_feeds):
        a = time.perf_counter(); state.run(ctx, f, output_names=["out"]); ts.append(time.perf_counter() - a)
    return np.median(ts[10:]) * 1e6


for nq, nkv in ((9, 3), (14, 2)):
    for r in range(2):
        f32, f16 = bound_steps(nq, nkv, np.float32), bound_steps(nq, nkv, np.float16)
        print(f"{nq}/{nkv} heads, bound caches 1024..1234: onnx-light FLOAT {f32:.0f} us, "
              f"FLOAT16 {f16:.0f} us, FLOAT16/FLOAT {f16 / f32:.2f}")
