"""Fault injection on a multi-node decoder step (the tiny Llama exported with KV caches,
tests/python/models/export_hf.py): a node that throws, or an allocation that fails, at every
position of one decode step. After each failure the state's values are bitwise equal to
before and held in the same buffers, the error names what failed, and the next run succeeds
with the logits of a state that never failed."""
from __future__ import annotations

import re

import numpy as np
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime

ARCH, SIZE = "llama", "tiny"


@pytest.fixture(autouse=True)
def _disarm():
    yield
    runtime.disarm_fault()


def make_state(executor: str, capacity=None):
    model = ol_onnx.load_model(export_hf.ensure(ARCH, with_cache=True, size=SIZE))
    export_hf.add_cache_bindings(model, export_hf.cache_shape(ARCH, SIZE)[0])
    return runtime.PersistentValueState(
        model, initial=export_hf.empty_cache(ARCH, 1, SIZE),
        options=runtime.RuntimeSessionOptions(executor=executor, **capacity_option(capacity)))


def capacity_option(capacity):
    return {} if capacity is None else {"persistent_tensor_initial_capacity": capacity}


def feeds(ids, start):
    return {"input_ids": ids, "attention_mask": np.ones((1, start + ids.shape[1]), np.int64),
            "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64)[None]}


def step(state, context, ids, start):
    out = state.run(context, feeds(ids, start))
    logits = np.from_dlpack(out["logits"]).copy()
    del out  # no present kept alive: the caches may grow in place
    return logits


def snapshot(state):
    """Each retained value's bytes and the address of the buffer that holds it."""
    views = {name: np.from_dlpack(v) for name, v in state.values.items()}
    return {name: (a.copy(), a.__array_interface__["data"][0]) for name, a in views.items()}


def assert_unchanged(before, after):
    assert before.keys() == after.keys()
    for name, (values, address) in before.items():
        assert after[name][1] == address, f"{name} moved to another buffer"
        assert after[name][0].dtype == values.dtype and after[name][0].shape == values.shape
        assert after[name][0].tobytes() == values.tobytes(), f"{name} changed"


def two_steps_in(executor, capacity=None):
    """A state after its prompt and one decode step, and the token and position to go on."""
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    state = make_state(executor, capacity)
    ids = np.random.default_rng(5).integers(1, export_hf.vocab_size(ARCH, SIZE), (1, 6),
                                            dtype=np.int64)
    start = 0
    for _ in range(2):
        logits = step(state, context, ids, start)
        start += ids.shape[1]
        ids = np.array([[int(logits[0, -1].argmax())]], np.int64)
    return state, context, ids, start


# Capacity 7 holds the 6-token prompt and one decode token exactly: the faulted step must
# grow every cache (new buffers, prefix copied), so failures land inside the growth too.
@pytest.mark.parametrize("capacity", [None, 7], ids=["in-place", "growing"])
@pytest.mark.parametrize("executor", ["inline", "auto"])
@pytest.mark.parametrize("site", ["node", "allocation"])
def test_a_fault_at_every_position_of_a_step_leaves_the_state_unchanged(site, executor, capacity):
    reference, ref_context, ids, start = two_steps_in(executor, capacity)
    runtime.arm_fault(site, -1)  # count the step's events on a state that does not fail
    expected = step(reference, ref_context, ids, start)
    events = runtime.fault_count(site)
    runtime.disarm_fault()
    assert events > 10, f"a decode step of the tiny Llama has more than 10 {site} events"

    state, context, ids_again, start_again = two_steps_in(executor, capacity)
    assert np.array_equal(ids_again, ids) and start_again == start
    before = snapshot(state)
    failures = 0
    for index in range(events + 1):
        runtime.arm_fault(site, index)
        try:
            logits = step(state, context, ids, start)
        except MemoryError as e:
            assert site == "allocation", f"fault at {site} {index}: {e}"
        except RuntimeError as e:
            assert site == "node" and "injected fault" in str(e), f"{site} {index}: {e}"
            assert re.match(r"^\w+ node '[^']*': injected fault", str(e)), f"names the node: {e}"
        else:
            # Only past the step's last event does the run go through.
            assert index >= events, f"{site} {index} of {events} failed nothing"
            break
        finally:
            runtime.disarm_fault()
        failures += 1
        assert_unchanged(before, snapshot(state))
    assert failures == events
    # The run that went through, with the fault armed past its end, equals a state that
    # never failed.
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-6)
    assert int(logits[0, -1].argmax()) == int(expected[0, -1].argmax())
    # And the state goes on: the next step runs too.
    nxt = np.array([[int(logits[0, -1].argmax())]], np.int64)
    after = step(state, context, nxt, start + 1)
    np.testing.assert_allclose(after, step(reference, ref_context, nxt, start + 1),
                               rtol=0, atol=1e-6)


def test_fault_hooks_check_their_arguments():
    with pytest.raises(ValueError, match="site must be 'allocation' or 'node', not 'disk'"):
        runtime.arm_fault("disk", 0)
    with pytest.raises(ValueError, match="not 'disk'"):
        runtime.fault_count("disk")


def test_an_allocation_failure_in_a_node_is_a_memory_error_naming_the_node():
    state, context, ids, start = two_steps_in("inline")
    runtime.arm_fault("node", -1)
    runtime.arm_fault("allocation", 0)  # the step's first allocation, inside some node
    with pytest.raises(MemoryError, match=r"^\w+ node '[^']*': out of memory \(an allocation failed\)"):
        step(state, context, ids, start)


# --- a run's memory limit (RuntimeSessionOptions.max_run_bytes) ----------------------------

def test_max_run_bytes_option_is_a_nonnegative_int_defaulting_to_unlimited():
    assert runtime.RuntimeSessionOptions().max_run_bytes == 0
    options = runtime.RuntimeSessionOptions(max_run_bytes=1 << 20)
    assert options.max_run_bytes == 1 << 20 and "max_run_bytes=1048576" in repr(options)
    options.max_run_bytes = None
    assert options.max_run_bytes == 0
    with pytest.raises(ValueError, match="max_run_bytes must be nonnegative"):
        runtime.RuntimeSessionOptions(max_run_bytes=-1)
    with pytest.raises(TypeError, match="max_run_bytes must be an int"):
        runtime.RuntimeSessionOptions(max_run_bytes=1.5)


def demo_state(session):
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, empty_cache
    return runtime.PersistentValueState(session, empty_cache(TinyDecoderConfig()))


def demo_step(state, context, tokens, start):
    ids = np.array([tokens], np.int64)
    out = state.run(context, {"input_ids": ids,
                              "position_ids": np.arange(start, start + len(tokens))[None]},
                    output_names=["logits"])
    return np.from_dlpack(out["logits"]).copy()


@pytest.mark.parametrize("executor", ["inline", "flow_graph"])
def test_a_run_past_max_run_bytes_fails_naming_the_node_and_leaves_the_state_unchanged(executor):
    """The demo decoder with a 320 KiB limit (one intra-op thread, so scratch does not depend
    on the core count): a 4-token prompt and single-token steps fit; a 128-token chunk needs
    more at once. The refused chunk publishes nothing, the next step runs, and a state on a
    session with the limit raised runs the chunk from the same values."""
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder
    model = build_tiny_decoder(config=TinyDecoderConfig())
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(23)))

    def session(limit):
        return runtime.RuntimeSession(model, runtime.RuntimeSessionOptions(
            max_run_bytes=limit, intra_op_threads=1, executor=executor))

    limited, reference = demo_state(session(320 << 10)), demo_state(session(0))
    for tokens, start in [([40, 41, 42, 43], 0), ([44], 4), ([45], 5)]:
        np.testing.assert_array_equal(demo_step(limited, context, tokens, start),
                                      demo_step(reference, context, tokens, start))
    before = snapshot(limited)
    chunk = [1 + i % 90 for i in range(128)]
    with pytest.raises(MemoryError, match=r"^\w+ node '[^']*': allocating \d+ bytes would bring "
                       r"this run's live allocations from \d+ bytes to more than "
                       r"max_run_bytes = 327680$"):
        demo_step(limited, context, chunk, 6)
    assert_unchanged(before, snapshot(limited))
    raised = demo_state(session(1 << 30))
    raised.reset(limited.values)
    np.testing.assert_array_equal(demo_step(raised, context, chunk, 6),
                                  demo_step(reference, context, chunk, 6))
    # The limited state goes on where it was (position 6), with the logits of a state that
    # never failed.
    other = demo_state(session(0))
    for tokens, start in [([40, 41, 42, 43], 0), ([44], 4), ([45], 5)]:
        demo_step(other, context, tokens, start)
    np.testing.assert_array_equal(demo_step(limited, context, [46], 6),
                                  demo_step(other, context, [46], 6))
