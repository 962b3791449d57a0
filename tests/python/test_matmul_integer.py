"""Dynamic int8 quantization as onnxruntime's `quantize_dynamic` writes it: DynamicQuantizeLinear
and MatMulInteger (standard ONNX), against the ONNX reference evaluator and onnxruntime on the
same files (exact integers; the scale and zero point bit for bit), with every operand type,
zero-point layout and shape MatMulInteger allows here, a constant weight and a weight fed per
call, the errors that name a bad input, and a decoder quantized by `quantize_dynamic` that
generates onnxruntime's greedy tokens with persistent caches."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

TYPES = {"uint8": (TensorProto.UINT8, np.uint8), "int8": (TensorProto.INT8, np.int8)}


def run_ours(model: onnx.ModelProto, feeds: dict) -> dict:
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    session = runtime.RuntimeSession(model.SerializeToString())
    out = session.run(context, feeds)
    return {o.name: np.from_dlpack(out[o.name]).copy() for o in model.graph.output}


def random_bytes(shape, dtype, rng):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def matmul_integer_model(a_shape, b_shape, a_type, b_type, a_zero=None, b_zero=None,
                         b_constant=True, seed=0):
    rng = np.random.default_rng(seed)
    b = random_bytes(b_shape, TYPES[b_type][1], rng)
    inputs = [helper.make_tensor_value_info("a", TYPES[a_type][0], list(a_shape))]
    inits, names, feeds = [], ["a", "b"], {"a": random_bytes(a_shape, TYPES[a_type][1], rng)}
    if b_constant:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TYPES[b_type][0], list(b_shape)))
        feeds["b"] = b
    for name, shape, kind in (("a_zero", a_zero, a_type), ("b_zero", b_zero, b_type)):
        if shape is None:
            names.append("")
            continue
        names.append(name)
        inits.append(numpy_helper.from_array(random_bytes(shape, TYPES[kind][1], rng), name))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulInteger", names, ["y"])
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, feeds


CASES = [
    # (A shape, B shape, a_zero shape, b_zero shape)
    ((1, 576), (576, 100), (), ()),          # a decode row, per-tensor zero points
    ((7, 96), (96, 40), None, (40,)),        # per-column b zero points, no a zero point
    ((5, 33), (33, 17), (5, 1), (17,)),      # per-row a and per-column b zero points
    ((2, 3, 64), (64, 48), (), (48,)),       # a batch folded into M over one weight
    ((2, 3, 13), (2, 13, 9), (), ()),        # a batch of weights
    ((1, 3, 13), (4, 13, 9), None, None),    # broadcast batch
    ((13,), (13, 9), None, None),            # rank-1 A
    ((3, 13), (13,), None, None),            # rank-1 B
    ((0, 16), (16, 8), None, None),          # no rows
]


@pytest.mark.parametrize("a_type", sorted(TYPES))
@pytest.mark.parametrize("b_type", sorted(TYPES))
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("b_constant", [True, False])
def test_matmul_integer_equals_the_reference(a_type, b_type, case, b_constant):
    a_shape, b_shape, a_zero, b_zero = case
    model, feeds = matmul_integer_model(a_shape, b_shape, a_type, b_type, a_zero, b_zero,
                                        b_constant)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    ours = run_ours(model, feeds)["y"]
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, expected)


def test_a_zero_point_per_row_as_an_m_vector():
    # The spec's 2-D form [M] (the reference evaluator only broadcasts [M, 1]).
    model, feeds = matmul_integer_model((5, 33), (33, 17), "int8", "uint8", (5,), (17,))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    a = feeds["a"].astype(np.int32) - inits["a_zero"].astype(np.int32)[:, None]
    expected = a @ (inits["b"].astype(np.int32) - inits["b_zero"].astype(np.int32))
    np.testing.assert_array_equal(run_ours(model, feeds)["y"], expected)


@pytest.mark.parametrize("a_type", sorted(TYPES))
@pytest.mark.parametrize("b_type", sorted(TYPES))
def test_matmul_integer_equals_onnxruntime(a_type, b_type):
    # onnxruntime takes per-tensor A zero points and per-column B zero points.
    model, feeds = matmul_integer_model((4, 2, 200), (200, 70), a_type, b_type, (), (70,))
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(run_ours(model, feeds)["y"], theirs)


def test_a_constant_weight_is_packed_once_and_reused():
    model, feeds = matmul_integer_model((3, 64), (64, 32), "uint8", "int8", (), (32,))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    session = runtime.RuntimeSession(model.SerializeToString())
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    before = runtime.packed_weight_bytes()
    for _ in range(3):
        np.testing.assert_array_equal(np.from_dlpack(session.run(context, feeds)["y"]), expected)
    # One pack of the 64 x 32 weight: its two strips of 16 columns padded to a group of four
    # (64 rows x 64 columns of bytes), and a column sum and a shift per column (int32).
    assert runtime.packed_weight_bytes() - before == 64 * 64 + 4 * (32 + 32)


@pytest.mark.parametrize("zero_shape,message", [
    ((5,), r"b_zero_point \[5\] must hold one value or one per columns of B \(N = 8\)"),
    ((2, 1, 8), r"b_zero_point \[2, 1, 8\] must hold one value or one per columns of B"),
])
def test_matmul_integer_rejects_zero_points_it_cannot_apply(zero_shape, message):
    model, feeds = matmul_integer_model((2, 3, 16), (2, 16, 8), "uint8", "uint8", None, zero_shape)
    with pytest.raises(Exception, match=message):
        run_ours(model, feeds)


def test_matmul_integer_rejects_other_types_naming_the_input():
    model, feeds = matmul_integer_model((2, 16), (16, 8), "uint8", "uint8")
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT16
    feeds["a"] = feeds["a"].astype(np.int16)
    with pytest.raises(Exception, match="MatMulInteger.*input 'A' \\(UINT8 or INT8\\).*INT16"):
        run_ours(model, feeds)


def dql_model(shape):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(shape))], [
        helper.make_tensor_value_info("y", TensorProto.UINT8, None),
        helper.make_tensor_value_info("scale", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("zero", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("shape,low,high", [((1, 576), -3.0, 2.0), ((3, 7, 33), 0.5, 4.0),
                                            ((17,), -5.0, -0.25), ((4, 4), 0.0, 0.0)])
def test_dynamic_quantize_linear_equals_the_reference_and_onnxruntime(shape, low, high):
    rng = np.random.default_rng(3)
    x = rng.uniform(low, high, size=shape).astype(np.float32)
    model = dql_model(shape)
    ours = run_ours(model, {"x": x})
    reference = ReferenceEvaluator(model).run(None, {"x": x})
    theirs = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, ref, other in zip(("y", "scale", "zero"), reference, theirs):
        assert ours[name].dtype == ref.dtype and ours[name].shape == ref.shape
        np.testing.assert_array_equal(ours[name], other)
        # All zeros: the reference's code gives scale 1/255 where its comment and onnxruntime
        # say 1 (y and the zero point are 0 either way).
        if not (name == "scale" and low == high == 0.0):
            np.testing.assert_array_equal(ours[name], ref)


def test_dynamic_quantize_linear_rejects_a_float16_input():
    model = dql_model((2, 3))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    with pytest.raises(Exception, match="DynamicQuantizeLinear.*input 'x' \\(only FLOAT\\)"):
        run_ours(model, {"x": np.zeros((2, 3), np.float16)})


@pytest.mark.parametrize("weight_type,per_channel", [("QInt8", False), ("QUInt8", True)])
def test_a_dynamically_quantized_decoder_generates_onnxruntimes_tokens(tmp_path, weight_type,
                                                                       per_channel):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from test_exported_generation import onnxruntime_greedy, prompt_and_mask

    path = str(tmp_path / "quantized.onnx")
    quantize_dynamic(export_hf.ensure("llama", with_cache=True), path,
                     weight_type=getattr(QuantType, weight_type), per_channel=per_channel)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    ids, mask = prompt_and_mask(1)
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape("llama")[0])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    tokens = np.from_dlpack(runtime.generate(
        model, context, {"input_ids": ids, **export_hf.empty_cache("llama")},
        runtime.GenerationOptions(max_new_tokens=10)))
    np.testing.assert_array_equal(tokens, onnxruntime_greedy(path, "llama", ids, mask, 10))


def quantized_product_model(weight_type, per_column, m=3, k=96, n=40, seed=5):
    """MatMul(x, W) after quantize_dynamic: DynamicQuantizeLinear, MatMulInteger, Cast and the
    two Muls of the scales, as onnxruntime writes them."""
    import os
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=getattr(QuantType, weight_type),
                         per_channel=per_column)
        quantized = onnx.load(dst)
    return quantized, {"x": rng.standard_normal((m, k)).astype(np.float32) * 3}


@pytest.mark.parametrize("weight_type,per_column", [("QInt8", False), ("QUInt8", True),
                                                    ("QInt8", True)])
def test_the_quantized_product_runs_as_one_fused_node_with_the_same_bits(weight_type,
                                                                         per_column):
    model, feeds = quantized_product_model(weight_type, per_column)
    ops = [n.op_type for n in model.graph.node]
    assert {"DynamicQuantizeLinear", "MatMulInteger", "Cast"} <= set(ops) and ops.count("Mul") == 2
    data = model.SerializeToString()
    results = {}
    for fuse in (True, False):
        context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(17)),
                                         events_enabled=True)
        session = runtime.RuntimeSession(data, runtime.RuntimeSessionOptions(fuse_subgraphs=fuse))
        results[fuse] = np.from_dlpack(session.run(context, feeds)["y"]).copy()
        kernels = sorted(e.op_type for e in context.events()
                         if e.action == runtime.RuntimeEventAction.kKernel)
        if fuse:  # the quantization stays its own node (several products may share it)
            assert kernels == ["DynamicQuantizeLinear", "MatMulIntegerToFloat"]
    np.testing.assert_array_equal(results[True], results[False])
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(results[True], theirs, rtol=1e-6, atol=1e-6 * np.abs(theirs).max())


def test_a_dynamically_quantized_model_runs_per_request_in_the_scheduler(tmp_path):
    """DynamicQuantizeLinear takes one range over its whole input: rows of several requests in
    one call would set each other's quantization. The scheduler runs such a model per request
    even when it is prepared for batching (paged='rows'), so each request still gets the
    tokens it gets alone, which are onnxruntime's greedy tokens on the quantized file."""
    from onnxruntime.quantization import quantize_dynamic
    from test_prepare_paged import check_scheduled_as_alone

    from onnx_light import prepare

    quantized = str(tmp_path / "quantized.onnx")
    quantize_dynamic(export_hf.ensure("llama", with_cache=True, raw=True), quantized)
    prepare.prepare_decoder(quantized, tmp_path / "rows.onnx", bind="auto", paged="rows")
    model = ol_onnx.load_model(tmp_path / "rows.onnx")
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rng = np.random.default_rng(11)
    feeds = [{"input_ids": rng.integers(0, 128, (1, n), dtype=np.int64),
              **{f"past_key_values.{i}": [{"blocks": []}] for i in range(2)}} for n in (3, 9, 5)]
    check_scheduled_as_alone(model, context, quantized, feeds, "per_request")
