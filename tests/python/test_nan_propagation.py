"""A NaN among the keys a query attends to makes that query's output NaN, as ONNX Softmax
does (and onnxruntime on the same file), on every attention path: the plan's fused
ScaledDotProductAttention (prompt and decode, split across threads or not) and the ONNX
Attention kernel. The kernels used to drop the NaN from their running maximum and return
wrong finite numbers instead. Keys a query never reads (hidden by causality, a -inf mask
or a window) do not reach it: see the last test."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

D = 16


def decomposed_attention(tmp_path, s, t):
    """Q [1,1,s,D] against K/V [1,1,t,D]: MatMul, scale, an added mask, Softmax, MatMul (what
    the plan fuses into one kernel)."""
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             h.make_node("MatMul", ["q", "kt"], ["s"]),
             h.make_node("Mul", ["s", "scale"], ["ss"]),
             h.make_node("Add", ["ss", "mask"], ["sm"]),
             h.make_node("Softmax", ["sm"], ["p"], axis=-1),
             h.make_node("MatMul", ["p", "v"], ["y"])]
    inputs = [h.make_tensor_value_info(n, TP.FLOAT, shape) for n, shape in
              (("q", [1, 1, s, D]), ("k", [1, 1, t, D]), ("v", [1, 1, t, D]),
               ("mask", [1, 1, s, t]))]
    graph = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", TP.FLOAT, None)],
                         [h.make_tensor("scale", TP.FLOAT, [], [0.25])])
    path = str(tmp_path / "attention.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 18)]), path)
    return path


def run_onnx_light(path, feeds, fuse, threads):
    options = runtime.RuntimeSessionOptions()
    options.fuse_subgraphs = fuse
    options.intra_op_threads = threads
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)),
                                 events_enabled=True)
    session = runtime.RuntimeSession(ol_onnx.load_model(path), options)
    y = np.from_dlpack(session.run(ctx, feeds)["y"]).copy()
    kernels = [e.op_type for e in ctx.events() if e.action == runtime.RuntimeEventAction.kKernel]
    return y, kernels


def feeds_with_nan(s, t, poisoned, mask):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, s, D)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, t, D)).astype(np.float32) for _ in range(2))
    k[0, 0, poisoned] = np.nan
    return {"q": q, "k": k, "v": v, "mask": mask}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fuse", [True, False])
def test_a_nan_key_under_a_finite_causal_mask_makes_every_row_nan(tmp_path, fuse, threads):
    # torch's masks are finfo.min, not -inf: NaN + finfo.min is NaN, so every row sees it.
    s = t = 11
    path = decomposed_attention(tmp_path, s, t)
    mask = np.where(np.tril(np.ones((s, t), bool)), 0,
                    np.finfo(np.float32).min).astype(np.float32)[None, None]
    feeds = feeds_with_nan(s, t, 7, mask)
    y, kernels = run_onnx_light(path, feeds, fuse, threads)
    assert ("ScaledDotProductAttention" in kernels) == fuse
    expected = ort.InferenceSession(path).run(None, feeds)[0]
    assert np.isnan(expected).all()
    assert np.isnan(y).all(), np.isnan(y).any(-1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fuse", [True, False])
def test_a_nan_among_many_keys_makes_the_decode_row_nan_wherever_it_sits(tmp_path, fuse,
                                                                        threads):
    # One query over 1000 keys (split into chunks across threads on the fused path), the NaN
    # at the start, inside and at the end of blocks and chunks (a NaN in a block's last
    # vector used to become the block's maximum and was then lost); the same call without
    # the NaN matches onnxruntime.
    t = 1000
    path = decomposed_attention(tmp_path, 1, t)
    mask = np.zeros((1, 1, 1, t), np.float32)
    for poisoned in (0, 7, 57, 63, 249, 250, 313, 613, 999):
        y, kernels = run_onnx_light(path, feeds_with_nan(1, t, poisoned, mask), fuse, threads)
        assert ("ScaledDotProductAttention" in kernels) == fuse
        assert np.isnan(y).all(), poisoned
    feeds = feeds_with_nan(1, t, 0, mask)
    feeds["k"][0, 0, 0] = 0.5
    y, _ = run_onnx_light(path, feeds, fuse, threads)
    expected = ort.InferenceSession(path).run(None, feeds)[0]
    np.testing.assert_allclose(y, expected, atol=1e-5, rtol=0)


def test_the_onnx_attention_kernel_gives_nan_to_the_rows_that_see_the_nan_key(tmp_path):
    # Rows that see key 4 (causal rows 4.. of head 1) are NaN, as in onnxruntime. Rows before
    # it never read it: the kernel skips the keys causality hides instead of adding -inf to
    # their scores, so there it differs from onnxruntime, whose NaN + -inf makes those rows
    # NaN too. They equal onnxruntime's rows on the same input without the NaN.
    s = t = 9
    node = h.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)
    inputs = [h.make_tensor_value_info(n, TP.FLOAT, [1, 2, s, D]) for n in ("q", "k", "v")]
    graph = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", TP.FLOAT, None)])
    path = str(tmp_path / "onnx_attention.onnx")
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 23)]), path)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((1, 2, s, D)).astype(np.float32) for n in ("q", "k", "v")}
    clean = {n: x.copy() for n, x in feeds.items()}
    feeds["k"][0, 1, 4] = np.nan
    y, kernels = run_onnx_light(path, feeds, True, 1)
    assert kernels == ["Attention"]
    expected = ort.InferenceSession(path).run(None, feeds)[0]
    assert np.isnan(expected[0, 1, 4:]).all() and np.isnan(y[0, 1, 4:]).all()
    assert not np.isnan(y[0, 1, :4]).any() and not np.isnan(y[0, 0]).any()
    without_nan = ort.InferenceSession(path).run(None, clean)[0]
    np.testing.assert_allclose(y[0, 0], without_nan[0, 0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(y[0, 1, :4], without_nan[0, 1, :4], atol=1e-5, rtol=0)
