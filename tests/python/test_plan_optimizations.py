"""What the plan-time optimisations (constant folding, the attention fusion, packed weights)
must not change, on decoders exported by torch.onnx.export with KV caches
(tests/python/models/export_hf.py): the tiny Llama, and 2-layer models with every width of
the SmolLM2-135M (Llama), Qwen2.5-0.5B (Qwen2) and Qwen3-0.6B shapes, random weights (Qwen3
through eager attention, which scales the scores rather than q and k).

  - logits within 1e-4 of onnxruntime on the same file, prompt then decode steps with the
    caches bound (the unpacked first call, the packing second call, packed calls after);
  - the fused plan replaces every layer's decomposed attention, RMS norms, rotary
    embeddings and SiLU by fused nodes, and folding removes the LM head's Transpose;
  - folded/unfolded and fused/unfused plans give the same tokens and logits within 1e-5.
"""
from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime
from process_memory import mapped_rss_kb

CASES = [("llama", "tiny"), ("llama", "smollm2_2l"), ("qwen2", "qwen05_2l"),
         ("qwen3", "qwen3_06b_2l")]
STEPS = 5


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{s}" for a, s in CASES])
def case(request):
    arch, size = request.param
    return arch, size, export_hf.ensure(arch, with_cache=True, size=size)


def feeds(ids, start):
    return {"input_ids": ids, "attention_mask": np.ones((1, start + ids.shape[1]), np.int64),
            "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64)[None]}


def onnxruntime_steps(path, arch, size, prompt):
    """Logits of every step (prompt, then the greedy token), presents fed back."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pairs = export_hf.cache_names(export_hf.cache_shape(arch, size)[0])
    cache = export_hf.empty_cache(arch, 1, size)
    ids, start, logits = prompt, 0, []
    for _ in range(STEPS):
        out = dict(zip(names, session.run(None, {**feeds(ids, start), **cache})))
        logits.append(out["logits"])
        cache = {past: out[present] for past, present in pairs}
        start += ids.shape[1]
        ids = np.array([[int(out["logits"][0, -1].argmax())]], np.int64)
    return logits


def onnx_light_steps(path, arch, size, prompt, **options):
    """Logits of every step and the op types of the kernel events of the last one."""
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape(arch, size)[0])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    state = runtime.PersistentValueState(
        model, initial=export_hf.empty_cache(arch, 1, size),
        options=runtime.RuntimeSessionOptions(**options))
    ids, start, logits, ops = prompt, 0, [], None
    for _ in range(STEPS):
        before = len(context.events())
        out = state.run(context, feeds(ids, start))
        logits.append(np.from_dlpack(out["logits"]).copy())
        del out
        ops = collections.Counter(e.op_type for e in context.events()[before:]
                                  if e.action == runtime.RuntimeEventAction.kKernel)
        start += ids.shape[1]
        ids = np.array([[int(logits[-1][0, -1].argmax())]], np.int64)
    return logits, ops


def prompt_for(arch, size):
    return np.random.default_rng(3).integers(0, export_hf.vocab_size(arch, size), (1, 9),
                                             dtype=np.int64)


def test_optimised_plan_matches_onnxruntime_within_1e_4(case):
    arch, size, path = case
    prompt = prompt_for(arch, size)
    ours, ops = onnx_light_steps(path, arch, size, prompt)
    theirs = onnxruntime_steps(path, arch, size, prompt)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= 1e-4, f"step {step}"
    layers = export_hf.cache_shape(arch, size)[0]
    # One fused attention per layer; no attention Softmax (or its NaN guard) left to run.
    assert ops["ScaledDotProductAttention"] == layers
    assert ops["Softmax"] == 0 and ops["IsNaN"] == 0
    # Per layer two RMS norms (four with Qwen3's q/k norms; plus the final one), two rotary
    # embeddings, one SiLU.
    assert ops["RMSNormalization"] == (4 if arch == "qwen3" else 2) * layers + 1
    assert ops["RotaryHalf"] == 2 * layers
    assert ops["SiluMul"] == layers
    assert ops["Pow"] == 0 and ops["Neg"] == 0 and ops["Sigmoid"] == 0
    # Per layer, Q/K/V and gate/up are each one product over the weights side by side; the
    # output and down projections and the LM head stay MatMuls (attention's own products
    # are inside the fused attention).
    assert ops["MatMulGroup"] == 2 * layers
    assert ops["MatMul"] == 2 * layers + 1


def test_folding_and_fusion_change_no_token_and_no_logit_beyond_1e_5(case):
    arch, size, path = case
    prompt = prompt_for(arch, size)
    reference, plain_ops = onnx_light_steps(path, arch, size, prompt, fold_constants=False,
                                            fuse_subgraphs=False)
    assert plain_ops["ScaledDotProductAttention"] == 0
    for options in ({"fold_constants": False}, {"fuse_subgraphs": False}, {}):
        logits, ops = onnx_light_steps(path, arch, size, prompt, **options)
        if options.get("fold_constants", True) and size != "tiny":
            # The tied LM head's Transpose of the embedding is folded to a view.
            assert ops["Transpose"] < plain_ops["Transpose"]
        for a, b in zip(logits, reference):
            assert int(a[0, -1].argmax()) == int(b[0, -1].argmax())
            assert np.abs(a - b).max() <= 1e-5, options


def test_spinning_helper_threads_change_no_bit_of_any_logit(case):
    """spin_wait_us (executor/parallel.h SpinTeamScope): the same kernels split the same work
    whichever threads take its pieces, so two threads spinning between kernels give exactly
    the logits of two threads that sleep."""
    arch, size, path = case
    prompt = prompt_for(arch, size)
    executor = {"executor": "inline"}
    reference, _ = onnx_light_steps(path, arch, size, prompt, intra_op_threads=2, spin_wait_us=0,
                                    **executor)
    for options in ({"intra_op_threads": 2, "spin_wait_us": 1000},
                    {"intra_op_threads": 2, "spin_wait_us": 1}):
        logits, _ = onnx_light_steps(path, arch, size, prompt, **options, **executor)
        for a, b in zip(logits, reference):
            np.testing.assert_array_equal(a, b, err_msg=str(options))


def test_spin_wait_is_1000_us_by_default_and_bounded():
    assert runtime.RuntimeSessionOptions().spin_wait_us == 1000
    options = runtime.RuntimeSessionOptions(spin_wait_us=500)
    assert options.spin_wait_us == 500
    for bad in (-1, 1_000_001):
        with pytest.raises(ValueError, match="spin_wait_us must be between 0 and 1000000"):
            runtime.RuntimeSessionOptions(spin_wait_us=bad)


def test_last_position_logits_equal_the_last_row_of_the_whole_logits(case):
    """state.run(..., last_position_only=True): the LM head multiplies the prompt's last row
    alone; the logits equal the last row of the whole prompt's logits (different products:
    GEMV against GEMM, so within 1e-5), and the caches, always computed whole, are the same:
    the next step's logits agree too."""
    arch, size, path = case
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape(arch, size)[0])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    session = runtime.cached_session(model)
    prompt = prompt_for(arch, size)
    results = []
    for last in (False, True):
        state = runtime.PersistentValueState(session, export_hf.empty_cache(arch, 1, size))
        logits = []
        ids, start = prompt, 0
        for _ in range(2):
            out = state.run(context, feeds(ids, start), output_names=["logits"],
                            last_position_only=last)
            logits.append(np.from_dlpack(out["logits"]).copy())
            del out
            start += ids.shape[1]
            ids = np.array([[int(logits[-1][0, -1].argmax())]], np.int64)
        results.append(logits)
    (whole, whole_next), (last, last_next) = results
    assert whole.shape[1] == prompt.shape[1] and last.shape == (1, 1, whole.shape[2])
    assert np.abs(last[0, 0] - whole[0, -1]).max() <= 1e-5
    assert last_next.shape == whole_next.shape == (1, 1, whole.shape[2])
    assert np.abs(last_next - whole_next).max() <= 1e-5
    with pytest.raises(ValueError, match="last_position_only needs output_names"):
        state.run(context, feeds(ids, start), last_position_only=True)


def test_steady_decode_takes_no_fresh_memory_and_copies_no_cache_or_weight():
    """Once a request's lengths have been seen (a first pass over the same prompt and steps
    packed the weights and sized every buffer), the decode steps of a second pass take no
    block from the system allocator (so no fresh buffer page-faults in), pack no weight and
    copy no cached prefix byte: every buffer comes back from the allocator's caches and every
    cache grows in place."""
    arch, size = "llama", "tiny"
    path = export_hf.ensure(arch, with_cache=True, size=size)
    model = ol_onnx.load_model(path)
    export_hf.add_cache_bindings(model, export_hf.cache_shape(arch, size)[0])
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    state = runtime.PersistentValueState(
        model, initial=export_hf.empty_cache(arch, 1, size),
        # Inline: one allocation order, so the second pass needs no block the first did not
        # (concurrent nodes may raise a size class's high-water mark by one, now and then).
        options=runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=64,
                                              executor="inline"))

    marks = []

    def request():
        ids, start = prompt_for(arch, size), 0
        state.reset(export_hf.empty_cache(arch, 1, size))
        for _ in range(24):
            out = state.run(context, feeds(ids, start))
            token = int(np.from_dlpack(out["logits"])[0, -1].argmax())
            del out  # the caller keeps no present alive: the cache may grow in place
            if start == 0:  # after the prompt step: the decode steps are measured
                marks.append((runtime.allocator_stats(), len(context.events())))
            start += ids.shape[1]
            ids = np.array([[token]], np.int64)

    request()
    request()
    before, first_event = marks[1]
    after = runtime.allocator_stats()
    assert after["system_allocations"] == before["system_allocations"]
    assert after["weight_packs"] == before["weight_packs"]
    storage = [e for e in context.events()[first_event:]
               if e.action == runtime.RuntimeEventAction.kPersistentStorage]
    assert storage, "the bound caches report their appends"
    assert sum(e.storage_prefix_copied_bytes for e in storage) == 0
    # Each cache's buffer was allocated at the prompt (capacity 64 covers every step).
    assert sum(e.storage_allocations for e in storage) == 0


def test_a_tied_float16_embedding_is_held_once_as_the_lm_heads_panels(tmp_path):
    """Model_fp16/q4f16 files tie the LM head to the FLOAT16 embedding: Gather(W) and
    MatMul(h, Transpose(W)). The Transpose folds to a view (no transposed copy), the LM head
    packs the view into 16-bit panels on its first call and releases the file's pages of W;
    the Gather faults in the rows it reads. Logits as onnxruntime's on the same file."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    vocab, hidden = 8192, 512  # W: 8 MiB of FLOAT16
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((vocab, hidden)) * 0.05).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["W", "ids"], ["h"], name="embed"),
         helper.make_node("Transpose", ["W"], ["WT"], perm=[1, 0], name="tie"),
         helper.make_node("MatMul", ["h", "WT"], ["logits"], name="lm_head")],
        "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "n"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT16, [1, "n", vocab])],
        [numpy_helper.from_array(w, "W")])
    path, data = str(tmp_path / "tied.onnx"), str(tmp_path / "tied.onnx.data")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path,
              save_as_external_data=True, location="tied.onnx.data", size_threshold=0)
    prompts = [np.array(ids, np.int64) for ids in ([[5, 900, 8000]], [[17]], [[4000]], [[5]])]
    reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    wanted = [reference.run(None, {"ids": ids})[0].astype(np.float32) for ids in prompts]
    del reference  # (its own mapping of the file would count below)
    before = runtime.allocator_stats()
    session = runtime.RuntimeSession(ol_onnx.load_model(path))
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    for i, (ids, want) in enumerate(zip(prompts, wanted)):
        got = np.from_dlpack(session.run(context, {"ids": ids})["logits"]).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        if i == 0:  # packed on the first call; W's pages released (a transposed copy would
            assert mapped_rss_kb(data) <= 64, mapped_rss_kb(data)  # have read them all)
    after = runtime.allocator_stats()
    # One 16-bit copy of W, as the LM head's panels, and no transposed copy in the heap.
    assert after["packed_weight_bytes"] - before["packed_weight_bytes"] == w.nbytes
    assert after["live_bytes"] - before["live_bytes"] < w.nbytes // 4
    del session
