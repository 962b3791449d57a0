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
