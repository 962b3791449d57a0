"""ai.rt::PagedAttention from Python (spec "Optional heterogeneous paged KV"): built in, decodes as
dense attention does, format policies chosen from Python, caches that resume in a new model."""
import numpy
import pytest

from onnx_light import onnx as ol
from onnx_light.onnx_py._onnxpykernels import runtime

HEADS, KV_HEADS, HEAD = 4, 2, 16


def tensor_input(graph, name, heads):
    t = graph.input.add(name=name).type.tensor_type
    t.elem_type = ol.TensorProto.FLOAT
    for d in (1, heads):
        t.shape.dim.add(dim_value=d)
    t.shape.dim.add(dim_param="tokens")
    t.shape.dim.add(dim_value=HEAD)


def paged_model(window=None, initializer=None):
    model = ol.ModelProto(ir_version=10)
    model.opset_import.add(domain="", version=18)
    model.opset_import.add(domain="ai.rt", version=1)
    g = model.graph
    g.name = "paged"
    tensor_input(g, "q", HEADS)
    tensor_input(g, "k", KV_HEADS)
    tensor_input(g, "v", KV_HEADS)
    g.input.add(name="past").type.struct_type.name = "cache"
    g.output.add(name="y").type.tensor_type.elem_type = ol.TensorProto.FLOAT
    g.output.add(name="present").type.struct_type.name = "cache"
    node = g.node.add(op_type="PagedAttention", domain="ai.rt", name="attention",
                      input=["q", "k", "v", "past"], output=["y", "present"])
    if window is not None:
        node.attribute.add(name="left_window_size", type=ol.AttributeProto.INT, i=window)
    g.persistent_bindings.add(input_name="past", output_name="present")
    if initializer is not None:
        initializer.name = "past"
        g.paged_cache_initializer.append(initializer)
    return model


def feeds(rng, tokens):
    return {"q": rng.standard_normal((1, HEADS, tokens, HEAD)).astype(numpy.float32),
            "k": rng.standard_normal((1, KV_HEADS, tokens, HEAD)).astype(numpy.float32),
            "v": rng.standard_normal((1, KV_HEADS, tokens, HEAD)).astype(numpy.float32)}


def reference(q, keys, values, window=None):
    """Causal grouped-query attention of q [1, H, L, D] over keys/values [1, Hkv, T, D]."""
    total, length = keys.shape[2], q.shape[2]
    group = q.shape[1] // keys.shape[1]
    k = numpy.repeat(keys, group, axis=1).astype(numpy.float64)
    v = numpy.repeat(values, group, axis=1).astype(numpy.float64)
    scores = q.astype(numpy.float64) @ k.transpose(0, 1, 3, 2) / numpy.sqrt(q.shape[3])
    position = total - length + numpy.arange(length)[:, None]
    key_index = numpy.arange(total)[None, :]
    visible = key_index <= position
    if window is not None:
        visible &= key_index >= position - window
    scores = numpy.where(visible, scores, -numpy.inf)
    weights = numpy.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ v


def quantized(x, storage, scale, zero):
    lo, hi = {"INT8": (-128, 127), "UINT8": (0, 255), "INT4": (-8, 7), "UINT4": (0, 15)}[storage]
    return (numpy.clip(numpy.rint(x / scale) + zero, lo, hi) - zero) * scale


@pytest.mark.parametrize("window", [None, 3])
def test_the_built_in_kernel_decodes_as_dense_attention(window):
    rng = numpy.random.default_rng(1)
    state = runtime.PersistentValueState(paged_model(window), {"past": {"blocks": []}})
    keys = numpy.zeros((1, KV_HEADS, 0, HEAD), numpy.float32)
    values = keys.copy()
    for tokens in (9, 1, 1, 1, 20, 1):
        f = feeds(rng, tokens)
        keys = numpy.concatenate([keys, f["k"]], axis=2)
        values = numpy.concatenate([values, f["v"]], axis=2)
        y = numpy.from_dlpack(state.run(runtime.RuntimeContext(), f)["y"])
        numpy.testing.assert_allclose(y, reference(f["q"], keys, values, window), atol=1e-5)
    cache = state.values["past"]
    assert isinstance(cache, ol.PagedCacheProto)
    # The state alone holds its cache, so each call fills the last page's spare rows before
    # adding pages of block_size (16) rows.
    assert [(b.start, b.length) for b in cache.blocks] == [(0, 16), (16, 16), (32, 1)]


def test_a_declarative_policy_switches_formats_once_the_cache_is_long_enough():
    rng = numpy.random.default_rng(2)
    context = runtime.RuntimeContext()
    policy = runtime.PagedFormatPolicy(key=("INT8", 0.02, 0), value=runtime.PagedFormat("UINT4", 0.25, 8),
                                       after_tokens=8)
    assert (policy.key.storage, policy.value.storage, policy.after_tokens) == ("INT8", "UINT4", 8)
    context.register_paged_attention(policy)
    state = runtime.PersistentValueState(paged_model(), {"past": {"blocks": []}})
    keys = numpy.zeros((1, KV_HEADS, 0, HEAD), numpy.float32)
    values = keys.copy()
    for step, tokens in enumerate((8, 1, 1)):
        f = feeds(rng, tokens)
        y = numpy.from_dlpack(state.run(context, f)["y"])
        # The current tokens take part as FLOAT; from the next call on, as stored.
        now_k = numpy.concatenate([keys, f["k"]], axis=2)
        now_v = numpy.concatenate([values, f["v"]], axis=2)
        numpy.testing.assert_allclose(y, reference(f["q"], now_k, now_v), atol=1e-5)
        stored = step > 0
        keys = numpy.concatenate([keys, quantized(f["k"], "INT8", 0.02, 0) if stored else f["k"]], axis=2)
        values = numpy.concatenate([values, quantized(f["v"], "UINT4", 0.25, 8) if stored else f["v"]], axis=2)
    # The FLOAT page is never converted; the quantized tokens start a page of their own, which
    # the next call (same formats, nobody else holding the cache) fills in place.
    blocks = state.values["past"].blocks
    assert [(b.start, b.length) for b in blocks] == [(0, 8), (8, 2)]
    assert [b.WhichOneof("key_payload") for b in blocks] == ["key", "encoded_key"]
    assert blocks[1].encoded_key.affine.storage_type == ol.TensorProto.INT8
    assert blocks[1].encoded_value.affine.storage_type == ol.TensorProto.UINT4


def test_a_callable_policy_sees_the_inputs_and_its_errors_name_it():
    seen = []

    def policy(key, value, past_length):
        seen.append((numpy.from_dlpack(key).shape, past_length))
        return ("INT4", 0.25, 0), "FLOAT"

    context = runtime.RuntimeContext()
    context.register_paged_attention(policy)
    state = runtime.PersistentValueState(paged_model(), {"past": {"blocks": []}})
    rng = numpy.random.default_rng(3)
    state.run(context, feeds(rng, 3))
    state.run(context, feeds(rng, 1))
    assert seen == [((1, KV_HEADS, 3, HEAD), 0), ((1, KV_HEADS, 1, HEAD), 3)]
    (block,) = state.values["past"].blocks  # the second call filled the first page
    assert block.length == 4
    assert block.encoded_key.affine.storage_type == ol.TensorProto.INT4
    assert block.WhichOneof("value_payload") == "value"

    def broken(key, value, past_length):
        raise ValueError("no format today")

    failing = runtime.RuntimeContext()
    failing.register_paged_attention(broken)
    before = state.values["past"].SerializeToString()
    with pytest.raises(ValueError, match="page format policy: .*no format today"):
        state.run(failing, feeds(rng, 1))
    assert state.values["past"].SerializeToString() == before  # nothing published
    with pytest.raises(TypeError, match="PagedFormatPolicy or a callable"):
        context.register_paged_attention(42)
    with pytest.raises(ValueError, match="unknown page storage type 'INT9'"):
        runtime.PagedFormat("INT9")


def test_a_serialized_cache_resumes_in_a_new_model_with_identical_next_outputs():
    rng = numpy.random.default_rng(4)
    state = runtime.PersistentValueState(paged_model(), {"past": {"blocks": []}})
    for tokens in (5, 1, 1):
        state.run(runtime.RuntimeContext(), feeds(rng, tokens))
    restored = ol.PagedCacheProto()
    restored.ParseFromString(state.values["past"].SerializeToString())
    resumed = runtime.PersistentValueState(paged_model(initializer=restored), {})
    nxt = feeds(rng, 1)
    a = numpy.from_dlpack(state.run(runtime.RuntimeContext(), nxt)["y"])
    b = numpy.from_dlpack(resumed.run(runtime.RuntimeContext(), nxt)["y"])
    numpy.testing.assert_array_equal(a, b)


def test_bad_inputs_are_rejected_naming_the_node_and_nothing_is_published():
    rng = numpy.random.default_rng(5)
    state = runtime.PersistentValueState(paged_model(), {"past": {"blocks": []}})
    state.run(runtime.RuntimeContext(), feeds(rng, 2))
    before = state.values["past"].SerializeToString()
    bad = feeds(rng, 1)
    bad["q"][0, 0, 0, 3] = numpy.nan
    with pytest.raises(ValueError, match="PagedAttention node 'attention': Q holds a non-finite value"):
        state.run(runtime.RuntimeContext(), bad)
    assert state.values["past"].SerializeToString() == before


def test_the_paged_tiny_decoder_gives_the_greedy_tokens_of_its_attention_form():
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache

    prompt = numpy.array([[5, 17, 33, 2, 40, 41, 42]], numpy.int64)
    tokens = {}
    for paged in (False, True):
        config = TinyDecoderConfig(paged=paged)
        model = build_tiny_decoder(config=config)
        assert any(n.op_type == ("PagedAttention" if paged else "Attention") for n in model.graph.node)
        feeds = {"input_ids": prompt, **empty_cache(config)}
        options = runtime.GenerationOptions(max_new_tokens=24)
        tokens[paged] = numpy.from_dlpack(runtime.generate(model, runtime.RuntimeContext(), feeds, options))
    numpy.testing.assert_array_equal(tokens[True], tokens[False])
    with pytest.raises(ValueError, match="needs onnx_light.onnx"):
        import onnx
        build_tiny_decoder(onnx, TinyDecoderConfig(paged=True))


def test_requests_decoded_together_by_run_rows_give_the_tokens_each_gives_alone():
    """Issue 15's foundation from Python: past_i are sequences of row caches, one model call
    (runtime.run_rows) per step for every running request; each request's tokens equal what
    runtime.generate gives it alone, and its caches fill their pages in place."""
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache

    config = TinyDecoderConfig(paged=True, row_caches=True)
    model = build_tiny_decoder(config=config)
    session = runtime.RuntimeSession(model)
    context = runtime.RuntimeContext()
    prompts = [[5, 17, 33, 2, 40, 41, 42], [60], [11, 12, 13, 14], [7, 7, 80, 3, 9]]
    new_tokens = [12, 9, 10, 6]
    alone = []
    for prompt, n in zip(prompts, new_tokens):
        feeds = {"input_ids": numpy.array([prompt], numpy.int64), **empty_cache(config)}
        out = numpy.from_dlpack(runtime.generate(model, runtime.RuntimeContext(), feeds,
                                                 runtime.GenerationOptions(max_new_tokens=n)))
        alone.append(out[0, len(prompt):].tolist())

    def logits_of(out):
        return numpy.from_dlpack(out["logits"])

    rows = [runtime.RowCaches({f"past_{i}": {"blocks": []} for i in range(config.num_layers)})
            for _ in prompts]
    tokens = []
    for prompt, caches in zip(prompts, rows):  # prompts alone: rows of a call share a length
        out = runtime.run_rows(session, context, {
            "input_ids": numpy.array([prompt], numpy.int64),
            "position_ids": numpy.arange(len(prompt), dtype=numpy.int64)[None]}, [caches])
        tokens.append([int(logits_of(out)[0, -1].argmax())])
    calls = 0
    while True:
        running = [r for r in range(len(prompts)) if len(tokens[r]) < new_tokens[r]]
        if not running:
            break
        ids = numpy.array([[tokens[r][-1]] for r in running], numpy.int64)
        positions = numpy.array([[len(prompts[r]) + len(tokens[r]) - 1] for r in running],
                                numpy.int64)
        out = runtime.run_rows(session, context, {"input_ids": ids, "position_ids": positions},
                               [rows[r] for r in running])
        calls += 1
        assert "present_0" not in out
        for b, r in enumerate(running):
            tokens[r].append(int(logits_of(out)[b, -1].argmax()))
    assert calls == max(new_tokens) - 1  # one call per step for all running requests
    assert tokens == alone
    assert len({tuple(t) for t in tokens}) == len(tokens)
    for r, caches in enumerate(rows):
        length = len(prompts[r]) + new_tokens[r] - 1
        assert caches.pages("past_0") == (length + 15) // 16  # filled in place
        blocks = caches.values["past_0"].blocks
        assert sum(b.length for b in blocks) == length
