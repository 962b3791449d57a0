"""One compiled model shared by every state, call and request (issue 11): states built on a
runtime.RuntimeSession, state.run(..., output_names=[...]) returning only the named outputs
(the natural loop then appends its caches in place: 0 prefix bytes per token), and
runtime.generate / ReferenceEvaluator.generate / RequestScheduler.submit compiling a model
object once (one plan, one copy of the packed weights, counted by runtime.packed_weight_bytes)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from onnx_light import onnx as ol_onnx
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder, empty_cache
from onnx_light.onnx.reference import ReferenceEvaluator
from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime

CONFIG = TinyDecoderConfig()
PROMPT = np.array([[40, 41, 42, 10, 77]], np.int64)


def accumulate_model():
    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "accumulate (float[2] delta, float[2] past) => (float[2] present, float[2] doubled)"
        "<float[2] two = {2.0, 2.0}>"
        "{ present = Add(delta, past)  doubled = Mul(delta, two) }"
    )
    binding = model.graph.persistent_bindings.add()
    binding.input_name = "past"
    binding.output_name = "present"
    return model


def context(events=False, opset=18):
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(opset)),
                                  events_enabled=events)


ZERO = {"past": np.zeros(2, np.float32)}
ONE = {"delta": np.ones(2, np.float32)}


@pytest.fixture()
def clean_cache():
    gc.collect()
    runtime.session_cache_clear()
    yield
    gc.collect()
    runtime.session_cache_clear()


def test_states_on_one_session_run_like_states_on_the_model():
    model = accumulate_model()
    session = runtime.RuntimeSession(model)
    ctx = context()
    a = runtime.PersistentValueState(session, ZERO)
    b = runtime.PersistentValueState(session, {"past": np.full(2, 10, np.float32)})
    alone = runtime.PersistentValueState(model, ZERO)
    for step in range(1, 4):
        out_a, out_b, out_alone = (s.run(ctx, ONE) for s in (a, b, alone))
        np.testing.assert_array_equal(np.from_dlpack(out_a["present"]), [step, step])
        np.testing.assert_array_equal(np.from_dlpack(out_b["present"]), [10 + step] * 2)
        np.testing.assert_array_equal(np.from_dlpack(out_alone["present"]), [step, step])
    assert a.session == session and b.session == session  # built on it, not on a copy
    assert alone.session != session
    assert session.plan_count == 1  # both states run the session's one plan
    assert a.model is model and session.model is model
    a.close()
    np.testing.assert_array_equal(np.from_dlpack(b.run(ctx, ONE)["present"]), [14, 14])


def test_a_state_on_a_session_uses_the_session_options():
    model = accumulate_model()
    session = runtime.RuntimeSession(model, runtime.RuntimeSessionOptions(
        persistent_tensor_initial_capacity=0))
    with pytest.raises(ValueError, match="options cannot be given with a RuntimeSession"):
        runtime.PersistentValueState(session, ZERO, options=runtime.RuntimeSessionOptions())
    state = runtime.PersistentValueState(session, ZERO)
    assert state.session.options.persistent_tensor_initial_capacity == 0
    # The bindings are still checked on a session.
    with pytest.raises(ValueError, match="missing initial value for persistent input 'past'"):
        runtime.PersistentValueState(session, {})


def test_run_returns_only_the_named_outputs_and_still_publishes_the_bound_ones():
    state = runtime.PersistentValueState(accumulate_model(), ZERO)
    ctx = context()
    out = state.run(ctx, ONE, output_names=["doubled"])
    assert list(out) == ["doubled"]
    np.testing.assert_array_equal(np.from_dlpack(out["doubled"]), [2, 2])
    np.testing.assert_array_equal(np.from_dlpack(state.values["past"]), [1, 1])
    assert state.run(ctx, ONE, output_names=[]) == {}
    np.testing.assert_array_equal(np.from_dlpack(state.values["past"]), [2, 2])
    out = state.run(ctx, ONE, None, ["present"])  # positional: completion, output_names
    np.testing.assert_array_equal(np.from_dlpack(out["present"]), [3, 3])
    assert set(state.run(ctx, ONE)) == {"present", "doubled"}  # default: every output


def test_unknown_output_names_are_rejected_by_name_before_the_run():
    state = runtime.PersistentValueState(accumulate_model(), ZERO)
    ctx = context()
    with pytest.raises(ValueError, match=r"unknown output name\(s\) 'logits', 'presnt'"):
        state.run(ctx, ONE, output_names=["presnt", "doubled", "logits"])
    np.testing.assert_array_equal(np.from_dlpack(state.values["past"]), [0, 0])  # unchanged
    with pytest.raises(TypeError, match="list of output names"):
        state.run(ctx, ONE, output_names="doubled")
    session = runtime.RuntimeSession(accumulate_model())
    feeds = {"delta": np.ones(2, np.float32), "past": np.zeros(2, np.float32)}
    assert list(session.run(ctx, feeds, ["doubled"])) == ["doubled"]
    with pytest.raises(ValueError, match=r"unknown output name\(s\) 'y'"):
        session.run(ctx, feeds, output_names=["y"])


def _storage(ctx):
    totals = {"prefix": 0, "allocations": 0}
    for event in ctx.events():
        if event.action == runtime.RuntimeEventAction.kPersistentStorage:
            totals["prefix"] += event.storage_prefix_copied_bytes
            totals["allocations"] += event.storage_allocations
    ctx.clear_events()
    return totals


def _decode_feeds(token, position):
    return {"input_ids": np.array([[token]], np.int64),
            "position_ids": np.array([[position]], np.int64)}


def test_the_natural_loop_asking_for_logits_copies_no_prefix():
    model = build_tiny_decoder(config=CONFIG)
    session = runtime.RuntimeSession(model)
    ctx = context(events=True, opset=23)

    # out = state.run(...) keeps the previous result alive during the next call. Asking for
    # the logits only, that result holds no cache, so each token appends in place.
    state = runtime.PersistentValueState(session, empty_cache(CONFIG))
    out = state.run(ctx, _decode_feeds(40, 0), output_names=["logits"])
    _storage(ctx)
    key = np.from_dlpack(state.values["past_key_0"]).__array_interface__["data"][0]
    lean_logits = []
    for t in range(1, 9):
        out = state.run(ctx, _decode_feeds(40 + t, t), output_names=["logits"])
        assert list(out) == ["logits"]
        lean_logits.append(np.from_dlpack(out["logits"]).copy())
        assert _storage(ctx) == {"prefix": 0, "allocations": 0}, t
        assert np.from_dlpack(state.values["past_key_0"]).__array_interface__["data"][0] == key
    assert np.from_dlpack(state.values["past_key_0"]).shape == (1, CONFIG.num_heads, 9,
                                                                 CONFIG.head_size)

    # The same loop returning every output: the caller's previous present_* forbid reuse,
    # so every token copies each cache's whole prefix into a new buffer.
    full = runtime.PersistentValueState(session, empty_cache(CONFIG))
    out = full.run(ctx, _decode_feeds(40, 0))
    _storage(ctx)
    row = 4 * CONFIG.num_heads * CONFIG.head_size  # bytes of one token of one cache
    with pytest.warns(RuntimeWarning, match="copied the cache 'past_key_0' and 3 more"):
        for t in range(1, 9):
            out = full.run(ctx, _decode_feeds(40 + t, t))
            assert _storage(ctx)["prefix"] == 2 * CONFIG.num_layers * t * row
            # Same numbers up to rounding (a strided in-place cache vs a dense one).
            np.testing.assert_allclose(np.from_dlpack(out["logits"]), lean_logits[t - 1],
                                       rtol=1e-5, atol=1e-5)


def _generate(model, ctx, tokens=4, **kwargs):
    return np.from_dlpack(runtime.generate(
        model, ctx, {"input_ids": PROMPT, **empty_cache(CONFIG)},
        runtime.GenerationOptions(max_new_tokens=tokens), **kwargs))


def test_generate_compiles_a_model_object_once(clean_cache):
    model = build_tiny_decoder(config=CONFIG)
    ctx = context(opset=23)
    before = runtime.packed_weight_bytes()
    first = _generate(model, ctx)
    packed = runtime.packed_weight_bytes() - before
    assert packed > 0  # the decode steps run on packed copies of the weights
    session = runtime.cached_session(model)
    for _ in range(3):
        np.testing.assert_array_equal(_generate(model, context(opset=23)), first)
    assert runtime.cached_session(model) == session
    assert session.plan_count == 1  # equivalent contexts share the plan
    assert runtime.packed_weight_bytes() - before == packed  # no second copy
    assert runtime.session_cache_size() == 1
    # A session can be passed instead of the model; session_options then belong to it.
    np.testing.assert_array_equal(_generate(session, ctx), first)
    with pytest.raises(ValueError, match="session_options cannot be given"):
        _generate(session, ctx, session_options=runtime.RuntimeSessionOptions())
    # Other options are another compiled session.
    options = runtime.RuntimeSessionOptions(intra_op_threads=1)
    np.testing.assert_array_equal(_generate(model, ctx, session_options=options), first)
    assert runtime.cached_session(model, options) != session
    assert runtime.packed_weight_bytes() - before == 2 * packed


def test_a_dropped_model_lets_go_of_its_session(clean_cache):
    ctx = context(opset=23)
    before = runtime.packed_weight_bytes()
    model = build_tiny_decoder(config=CONFIG)
    _generate(model, ctx)
    assert runtime.packed_weight_bytes() > before
    del model
    gc.collect()
    # At once, not at the next lookup: its plans and packed weights are freed with it.
    assert runtime.session_cache_size() == 0
    assert runtime.packed_weight_bytes() == before
    assert runtime.session_cache_sweep() == 0


def test_reference_evaluator_shares_the_model_session(clean_cache):
    model = build_tiny_decoder(config=CONFIG)
    evaluator = ReferenceEvaluator(model)
    feeds = {"input_ids": PROMPT, **empty_cache(CONFIG)}
    first = evaluator.generate(feeds, max_new_tokens=4)
    before = runtime.packed_weight_bytes()
    np.testing.assert_array_equal(evaluator.generate(feeds, max_new_tokens=4), first)
    np.testing.assert_array_equal(ReferenceEvaluator(model).generate(feeds, max_new_tokens=4),
                                  first)
    assert runtime.packed_weight_bytes() == before
    session = evaluator.session()
    assert session == runtime.cached_session(model)
    logits = evaluator.run(["logits"], {"input_ids": PROMPT, "position_ids": np.arange(
        5, dtype=np.int64)[None], **empty_cache(CONFIG)})
    assert logits[0].shape == (1, 5, CONFIG.vocab_size)
    assert session.plan_count == 1  # run and generate share the evaluator's plan


def test_a_model_changed_from_python_is_compiled_again(clean_cache):
    model = build_tiny_decoder(config=CONFIG)
    ctx = context(opset=23)
    first = _generate(model, ctx, tokens=6)
    session = runtime.cached_session(model)
    del session
    head = next(t for t in model.graph.initializer if t.name == "lm_head")
    weights = np.frombuffer(head.raw_data, np.float32)
    head.raw_data = (weights[::-1]).astype(np.float32).tobytes()  # a different head
    changed = _generate(model, ctx, tokens=6)
    copy = ol_onnx.ModelProto.FromString(model.SerializeToString())
    np.testing.assert_array_equal(changed, _generate(copy, ctx, tokens=6))
    assert not np.array_equal(changed, first)
    # Reading the model (views, iteration, serialisation) is not a change.
    session = runtime.cached_session(model)
    _ = [n.op_type for n in model.graph.node], model.graph.initializer[0].name
    model.SerializeToString()
    assert runtime.cached_session(model) == session


def test_scheduled_requests_of_one_model_share_one_session(clean_cache):
    model = build_tiny_decoder(config=CONFIG)
    ctx = context(opset=23)
    prompts = [np.array([[40 + i, 41, 42 + i]], np.int64) for i in range(8)]
    options = runtime.GenerationOptions(max_new_tokens=5)
    expected = [np.from_dlpack(runtime.generate(build_tiny_decoder(config=CONFIG), ctx,
                                                {"input_ids": p, **empty_cache(CONFIG)},
                                                options)) for p in prompts]
    gc.collect()
    runtime.session_cache_clear()
    before = runtime.packed_weight_bytes()
    scheduler = runtime.RequestScheduler(ctx, max_in_flight=8)
    handles = [scheduler.submit(model, {"input_ids": p, **empty_cache(CONFIG)}, options)
               for p in prompts]
    for handle, want in zip(handles, expected):
        np.testing.assert_array_equal(np.from_dlpack(handle.result()), want)
    scheduler.wait_idle()
    one_copy = runtime.packed_weight_bytes() - before
    assert runtime.session_cache_size() == 1
    assert runtime.cached_session(model).plan_count == 1
    # What one generate call of a fresh model object packs: the same single copy.
    other = build_tiny_decoder(config=CONFIG)
    _generate(other, ctx)
    assert runtime.packed_weight_bytes() - before == 2 * one_copy


def test_a_paged_cache_not_asked_for_is_not_converted_or_returned():
    from test_paged_cache_state import feeds as page_feeds
    from test_paged_cache_state import make_context as paged_context
    from test_paged_cache_state import paged_model

    state = runtime.PersistentValueState(paged_model(), {})
    ctx = paged_context()
    assert state.run(ctx, page_feeds(7, 8), output_names=[]) == {}
    assert state.run(ctx, page_feeds(9, 10), output_names=[]) == {}
    grown = state.values["cache"]  # published all the same
    assert isinstance(grown, ol_onnx.PagedCacheProto)
    assert [(b.start, b.length) for b in grown.blocks] == [(0, 3), (3, 1), (4, 1)]


def test_a_model_with_bindings_packs_its_weights_on_the_first_call_others_on_the_second():
    """A decoder (persistent bindings) always runs again: its constant weights are packed on
    its first call, the prompt, rather than stalling the first decode step; a plain model
    keeps packing on the second call (a model run once gains nothing from a copy). The
    logits are the same either way."""
    ctx = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))
    bound = build_tiny_decoder(config=CONFIG)
    plain = build_tiny_decoder(config=CONFIG)
    del plain.graph.persistent_bindings[:]
    feeds = {**_decode_feeds(40, 0), **empty_cache(CONFIG)}

    def packs():
        return runtime.allocator_stats()["weight_packs"]

    before = packs()
    state = runtime.PersistentValueState(bound, empty_cache(CONFIG))
    first_bound = np.from_dlpack(state.run(ctx, _decode_feeds(40, 0))["logits"]).copy()
    packed_by_bound = packs() - before
    assert packed_by_bound > 0
    state.run(ctx, _decode_feeds(41, 1))
    assert packs() - before == packed_by_bound  # nothing more on the second call

    session = runtime.RuntimeSession(plain)
    before = packs()
    first_plain = np.from_dlpack(session.run(ctx, feeds)["logits"]).copy()
    assert packs() - before == 0
    session.run(ctx, feeds)
    assert packs() - before == packed_by_bound
    np.testing.assert_allclose(first_plain, first_bound, rtol=1e-5, atol=1e-5)
