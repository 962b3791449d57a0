"""Append capacity of persistent K/V caches from Python: in-place appends (DLPack data
pointers), storage audit events, and the conservative reuse rules (live outputs and values
views, imported NumPy buffers, disabled capacity, per-(batch, head) blocks)."""
import numpy
import pytest

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime


def decode_model(batch=1, q_heads=2, kv_heads=1, dk=2, dv=3, elem="float"):
    def dims(heads, seq, d):
        return f"{elem}[{batch},{heads},{seq},{d}]"

    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 23]>'
        f"decode ({dims(q_heads, 1, dk)} q, {dims(kv_heads, 'S', dk)} k, "
        f"{dims(kv_heads, 'S', dv)} v, {dims(kv_heads, 'P', dk)} past_key, "
        f"{dims(kv_heads, 'P', dv)} past_value) => ({dims(q_heads, 1, dv)} y, "
        f"{dims(kv_heads, 'T', dk)} present_key, {dims(kv_heads, 'T', dv)} present_value)"
        "{ y, present_key, present_value = Attention(q, k, v, , past_key, past_value) }"
    )
    for name in ("key", "value"):
        binding = model.graph.persistent_bindings.add()
        binding.input_name = f"past_{name}"
        binding.output_name = f"present_{name}"
    return model


def make_context():
    return runtime.RuntimeContext(
        runtime.KernelContext(runtime.default_opset(23)), events_enabled=True
    )


def empty_cache(batch=1, kv_heads=1, dk=2, dv=3, length=0, dtype=numpy.float32):
    rng = numpy.random.default_rng(length)
    return {
        "past_key": rng.standard_normal((batch, kv_heads, length, dk)).astype(dtype),
        "past_value": rng.standard_normal((batch, kv_heads, length, dv)).astype(dtype),
    }


def token(t, batch=1, q_heads=2, kv_heads=1, dk=2, dv=3, dtype=numpy.float32):
    rng = numpy.random.default_rng(100 + t)
    return {
        "q": rng.standard_normal((batch, q_heads, 1, dk)).astype(dtype),
        "k": rng.standard_normal((batch, kv_heads, 1, dk)).astype(dtype),
        "v": rng.standard_normal((batch, kv_heads, 1, dv)).astype(dtype),
    }


def pointer(value):
    return numpy.from_dlpack(value).__array_interface__["data"][0]


def take_storage(context):
    """Sums of the kPersistentStorage reports since the last call, then clears the log."""
    fields = ("allocations", "allocated_bytes", "prefix_copied_bytes",
              "append_copied_bytes", "reuse_count")
    totals = dict.fromkeys(fields, 0)
    for event in context.events():
        if event.action == runtime.RuntimeEventAction.kPersistentStorage:
            for field in fields:
                totals[field] += getattr(event, "storage_" + field)
    context.clear_events()
    return totals


def counters(allocations, allocated, prefix, append, reuse):
    return {"allocations": allocations, "allocated_bytes": allocated,
            "prefix_copied_bytes": prefix, "append_copied_bytes": append,
            "reuse_count": reuse}


def run_pointers(state, context, feeds):
    """Runs one token keeping no output alive; returns (present_key pointer, outputs as numpy)."""
    outputs = state.run(context, feeds)
    arrays = {name: numpy.from_dlpack(value).copy() for name, value in outputs.items()}
    key = pointer(outputs["present_key"])
    del outputs
    return key, arrays


def test_decode_appends_in_place_and_reports_the_spec_byte_formula():
    dk, dv = 2, 3
    model = decode_model(dk=dk, dv=dv)
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=4)
    state = runtime.PersistentValueState(model, empty_cache(), options=options)
    context = make_context()
    keys, pointers = [], []
    for t in range(1, 7):
        feeds = token(t)
        keys.append(feeds["k"][0, 0, 0])
        key, arrays = run_pointers(state, context, feeds)
        pointers.append(key)
        numpy.testing.assert_array_equal(arrays["present_key"][0, 0], numpy.stack(keys))
        totals = take_storage(context)
        row = 4 * (dk + dv)
        if t == 1:
            assert totals == counters(2, 4 * row, 0, row, 0)
        elif t == 5:  # capacity 4 exhausted: doubled, the 4-token prefix copied once
            assert totals == counters(2, 8 * row, 4 * row, row, 0)
        else:
            assert totals == counters(0, 0, 0, row, 2)
    assert pointers[0] == pointers[1] == pointers[2] == pointers[3]
    assert pointers[4] != pointers[3]
    assert pointers[4] == pointers[5]
    # The retained value is the buffer the last call returned.
    assert pointer(state.values["past_key"]) == pointers[5]


def test_results_equal_the_capacity_free_state():
    model = decode_model(q_heads=4)
    with_capacity = runtime.PersistentValueState(model, empty_cache(length=3))
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=0)
    without = runtime.PersistentValueState(model, empty_cache(length=3), options=options)
    context = make_context()
    for t in range(5):
        _, a = run_pointers(with_capacity, context, token(t, q_heads=4))
        _, b = run_pointers(without, context, token(t, q_heads=4))
        for name in ("y", "present_key", "present_value"):
            numpy.testing.assert_array_equal(a[name], b[name])


def test_a_live_previous_output_forces_a_fresh_buffer_and_keeps_its_view():
    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = make_context()
    run_pointers(state, context, token(1))
    kept = state.run(context, token(2))
    old = numpy.from_dlpack(kept["present_key"])
    old_bytes = old.copy()
    context.clear_events()
    key, _ = run_pointers(state, context, token(3))
    # Default capacity 32: two new 32-token buffers, the 2-token prefixes copied.
    assert take_storage(context) == counters(2, 32 * 4 * 5, 2 * 4 * 5, 4 * 5, 0)
    assert key != old.__array_interface__["data"][0]
    assert old.shape == (1, 1, 2, 2)
    numpy.testing.assert_array_equal(old, old_bytes)


def test_a_live_values_view_forces_a_fresh_buffer():
    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = make_context()
    run_pointers(state, context, token(1))
    view = numpy.from_dlpack(state.values["past_value"])
    before = view.copy()
    context.clear_events()
    run_pointers(state, context, token(2))
    # Only the viewed value cache moves to a fresh buffer; the key cache is appended in place.
    totals = take_storage(context)
    assert (totals["allocations"], totals["reuse_count"]) == (1, 1)
    assert view.shape == (1, 1, 1, 3)
    numpy.testing.assert_array_equal(view, before)
    del view
    with pytest.warns(RuntimeWarning, match="copied the cache 'past_value' into a new buffer"):
        run_pointers(state, context, token(3))
    assert take_storage(context)["reuse_count"] == 2


def test_a_loop_keeping_every_output_is_warned_once_before_its_next_call():
    """`out = state.run(...)` keeps the previous call's caches alive through the next call,
    so each call copies them (as the contract requires). The state says so once, at the start
    of the call after the first such copy, naming the caches; output_names avoids it."""
    import warnings

    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = make_context()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = state.run(context, token(1))
        out = state.run(context, token(2))  # copies: the first call's caches are held
        assert caught == []
        out = state.run(context, token(3))
        assert [w.category for w in caught] == [RuntimeWarning]
        message = str(caught[0].message)
        assert message.startswith("PersistentValueState.run: the previous call copied the "
                                  "cache 'past_key' and 1 more into a new buffer")
        assert "output_names=['logits']" in message
        for t in range(4, 8):
            out = state.run(context, token(t))
        assert len(caught) == 1  # once per state
        del out
        fresh = runtime.PersistentValueState(decode_model(), empty_cache())
        for t in range(1, 8):
            fresh.run(context, token(t), output_names=["y"])
        assert len(caught) == 1


def test_a_warning_raised_as_an_error_comes_before_the_call_and_loses_nothing():
    import warnings

    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = make_context()
    kept = [state.run(context, token(1)), state.run(context, token(2))]
    before = numpy.from_dlpack(state.values["past_key"]).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="the previous call copied the cache"):
            state.run(context, token(3))
    numpy.testing.assert_array_equal(numpy.from_dlpack(state.values["past_key"]), before)
    assert before.shape == (1, 1, 2, 2)  # the refused call ran nothing
    del kept
    assert numpy.from_dlpack(state.run(context, token(3))["present_key"]).shape == (1, 1, 3, 2)


def test_numpy_initial_buffers_are_never_written():
    initial = empty_cache(length=2)
    copies = {name: array.copy() for name, array in initial.items()}
    state = runtime.PersistentValueState(decode_model(), initial)
    assert pointer(state.values["past_key"]) == initial["past_key"].__array_interface__["data"][0]
    context = make_context()
    key, _ = run_pointers(state, context, token(1))
    assert key != initial["past_key"].__array_interface__["data"][0]
    assert take_storage(context) == counters(2, 32 * 4 * 5, 2 * 4 * 5, 4 * 5, 0)
    for name, array in initial.items():
        numpy.testing.assert_array_equal(array, copies[name])


def test_reset_imports_bytes_but_not_capacity():
    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = make_context()
    outputs = state.run(context, token(1))
    returned = pointer(outputs["present_key"])
    state.reset({"past_key": outputs["present_key"], "past_value": outputs["present_value"]})
    del outputs
    assert pointer(state.values["past_key"]) == returned
    context.clear_events()
    key, _ = run_pointers(state, context, token(2))
    assert key != returned
    assert take_storage(context) == counters(2, 32 * 4 * 5, 4 * 5, 4 * 5, 0)


def test_capacity_option_is_copied_at_construction_and_zero_disables_it():
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=0)
    state = runtime.PersistentValueState(decode_model(), empty_cache(), options=options)
    options.persistent_tensor_initial_capacity = 64
    context = make_context()
    for t in range(1, 4):
        run_pointers(state, context, token(t))
        # The dense fallback: two result buffers, the whole prefix copied each token.
        assert take_storage(context) == counters(2, t * 4 * 5, (t - 1) * 4 * 5, 4 * 5, 0)


def test_several_kv_heads_append_per_block_and_match_onnxruntime():
    """[batch, heads, length, D] caches keep spare rows per (batch, head) block: after the
    first token only the new rows are copied, outputs are strided NumPy/DLPack views over
    one buffer, and every step equals onnxruntime fed with its own outputs."""
    import onnxruntime as ort

    batch, heads, dk, dv = 2, 2, 4, 4
    model = decode_model(batch=batch, q_heads=4, kv_heads=heads, dk=dk, dv=dv)
    initial = empty_cache(batch=batch, kv_heads=heads, dk=dk, dv=dv, length=5)
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=8)
    state = runtime.PersistentValueState(model, initial, options=options)
    plain = type(model)()
    plain.CopyFrom(model)
    del plain.graph.persistent_bindings[:]  # onnxruntime gets the same graph, fed by hand
    reference = ort.InferenceSession(plain.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    past = dict(initial)
    context = make_context()
    per_token = 4 * batch * heads * (dk + dv)
    pointers = []
    for t in range(1, 6):
        feeds = token(t, batch=batch, q_heads=4, kv_heads=heads, dk=dk, dv=dv)
        outputs = state.run(context, feeds)
        key = numpy.asarray(outputs["present_key"])
        assert key.shape == (batch, heads, 5 + t, dk)
        # Head-major blocks of 8 then 16 rows: the view steps over the spare rows.
        rows = 8 if 5 + t <= 8 else 16
        assert key.strides == (heads * rows * dk * 4, rows * dk * 4, dk * 4, 4)
        assert numpy.from_dlpack(outputs["present_key"]).strides == key.strides
        y, present_key, present_value = reference.run(None, {**feeds, **past})
        numpy.testing.assert_allclose(numpy.asarray(outputs["y"]), y, rtol=1e-5, atol=1e-6)
        numpy.testing.assert_array_equal(key, present_key)
        numpy.testing.assert_array_equal(numpy.asarray(outputs["present_value"]), present_value)
        past = {"past_key": present_key, "past_value": present_value}
        pointers.append(pointer(outputs["present_key"]))
        del outputs, key
        totals = take_storage(context)
        if t == 1:  # the imported 5-token cache is copied once into 8-row blocks
            assert totals == counters(2, 8 * per_token, 5 * per_token, per_token, 0)
        elif t == 4:  # 9 rows > 8: 16-row blocks, each block's 8-row prefix copied once
            assert totals == counters(2, 16 * per_token, 8 * per_token, per_token, 0)
        else:
            assert totals == counters(0, 0, 0, per_token, 2)
    assert pointers[0] == pointers[1] == pointers[2]
    assert pointers[3] == pointers[4] != pointers[2]


@pytest.mark.parametrize("dtype,elem", [(numpy.float16, "float16")])
def test_half_precision_caches_append_their_bits_in_place(dtype, elem):
    model = decode_model(elem=elem, dk=4, dv=4)
    state = runtime.PersistentValueState(model, empty_cache(dk=4, dv=4, dtype=dtype))
    context = make_context()
    keys, pointers = [], []
    for t in range(3):
        feeds = token(t, dk=4, dv=4, dtype=dtype)
        keys.append(feeds["k"][0, 0, 0])
        key, arrays = run_pointers(state, context, feeds)
        pointers.append(key)
        assert arrays["present_key"].dtype == dtype
        assert arrays["present_key"][0, 0].tobytes() == numpy.stack(keys).tobytes()
        totals = take_storage(context)
        assert totals["append_copied_bytes"] == 2 * (4 + 4)
        assert totals["prefix_copied_bytes"] == 0
    assert pointers[0] == pointers[1] == pointers[2]


def test_events_disabled_record_nothing():
    state = runtime.PersistentValueState(decode_model(), empty_cache())
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    first, _ = run_pointers(state, context, token(1))
    second, _ = run_pointers(state, context, token(2))
    assert first == second
    assert context.events() == []


def test_a_strided_cache_moves_to_another_state_without_a_copy():
    """The runtime Tensor of a strided cache is accepted as it is (a NumPy view of it would
    be refused as noncontiguous: inputs are never copied silently)."""
    heads, dk, dv = 2, 4, 4
    model = decode_model(q_heads=2, kv_heads=heads, dk=dk, dv=dv)
    first = runtime.PersistentValueState(model, empty_cache(kv_heads=heads, dk=dk, dv=dv))
    context = make_context()
    for t in range(3):
        first.run(context, token(t, q_heads=2, kv_heads=heads, dk=dk, dv=dv))
    values = first.values
    assert not numpy.asarray(values["past_key"]).flags.c_contiguous
    with pytest.raises(ValueError, match="input 'past_(key|value)' is noncontiguous"):
        runtime.PersistentValueState(
            model, {name: numpy.asarray(v) for name, v in values.items()})
    second = runtime.PersistentValueState(model, dict(values))
    assert pointer(second.values["past_key"]) == pointer(values["past_key"])
    del values
    feeds = token(9, q_heads=2, kv_heads=heads, dk=dk, dv=dv)
    a = {k: numpy.asarray(v).copy() for k, v in first.run(context, feeds).items()}
    b = {k: numpy.asarray(v).copy() for k, v in second.run(context, feeds).items()}
    for name in a:
        numpy.testing.assert_array_equal(a[name], b[name])
