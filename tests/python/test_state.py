"""runtime.PersistentValueState: the spec's example, zero-copy boundaries, cancellation,
overlap, validation errors and concurrent independent states."""
import threading

import numpy
import pytest

from onnx_light.onnx_lib import parser
from onnx_light.onnx_py._onnxpykernels import runtime

ACCUMULATE = (
    '<ir_version: 10, opset_import: ["" : 18]>'
    "accumulate (float[2] delta, float[2] past) => (float[2] present)"
    "{ present = Add(delta, past) }"
)


def make_model(text=ACCUMULATE, bindings=(("past", "present"),)):
    model = parser.parse_model(text)
    for input_name, output_name in bindings:
        binding = model.graph.persistent_bindings.add()
        binding.input_name = input_name
        binding.output_name = output_name
    return model


def make_context():
    return runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))


def data_pointer(value):
    return numpy.from_dlpack(value).__array_interface__["data"][0]


def test_spec_basic_feedback_loop():
    model = parser.parse_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "accumulate (float[2] delta, float[2] past) => (float[2] present)"
        "{ present = Add(delta, past) }"
    )
    binding = model.graph.persistent_bindings.add()
    binding.input_name = "past"
    binding.output_name = "present"
    context = runtime.RuntimeContext(
        runtime.KernelContext(runtime.default_opset(18))
    )
    initial = numpy.zeros(2, dtype=numpy.float32)
    state = runtime.PersistentValueState(model, initial={"past": initial})
    delta = numpy.ones(2, dtype=numpy.float32)
    first = state.run(context, {"delta": delta})
    second = state.run(context, {"delta": delta})
    numpy.testing.assert_array_equal(
        numpy.from_dlpack(second["present"]),
        [2, 2],
    )
    numpy.testing.assert_array_equal(numpy.from_dlpack(first["present"]), [1, 1])
    state.reset({"past": initial})
    numpy.testing.assert_array_equal(numpy.from_dlpack(state.values["past"]), [0, 0])
    state.close()
    # Exported views stay valid after close.
    numpy.testing.assert_array_equal(numpy.from_dlpack(second["present"]), [2, 2])


def test_numpy_initial_values_are_retained_without_copy():
    initial = numpy.array([3, 4], dtype=numpy.float32)
    state = runtime.PersistentValueState(make_model(), {"past": initial})
    assert data_pointer(state.values["past"]) == initial.__array_interface__["data"][0]
    del initial  # the state keeps the array's buffer alive
    numpy.testing.assert_array_equal(numpy.from_dlpack(state.values["past"]), [3, 4])


def test_publication_and_forwarding_share_the_output_buffer():
    state = runtime.PersistentValueState(make_model(), {"past": numpy.zeros(2, numpy.float32)})
    context = make_context()
    out = state.run(context, {"delta": numpy.ones(2, numpy.float32)})
    assert data_pointer(out["present"]) == data_pointer(state.values["past"])
    state.reset({"past": out["present"]})  # importing a returned view: no copy either
    assert data_pointer(state.values["past"]) == data_pointer(out["present"])


def test_torch_and_runtime_tensor_inputs_are_borrowed():
    import torch

    source = torch.tensor([1.0, 2.0])
    state = runtime.PersistentValueState(make_model(), {"past": source})
    assert data_pointer(state.values["past"]) == source.data_ptr()
    again = runtime.PersistentValueState(make_model(), {"past": state.values["past"]})
    assert data_pointer(again.values["past"]) == source.data_ptr()
    with pytest.raises(ValueError, match="requires grad"):
        runtime.PersistentValueState(make_model(), {"past": torch.ones(2, requires_grad=True)})


def test_cancelled_completion_rejects_the_call():
    state = runtime.PersistentValueState(make_model(), {"past": numpy.zeros(2, numpy.float32)})
    completion = runtime.TaskCompletion()
    completion.cancel("request no longer needed")
    with pytest.raises(runtime.CancelledError, match="request no longer needed"):
        state.run(make_context(), {"delta": numpy.ones(2, numpy.float32)}, completion)
    numpy.testing.assert_array_equal(numpy.from_dlpack(state.values["past"]), [0, 0])
    done = runtime.TaskCompletion()
    state.run(make_context(), {"delta": numpy.ones(2, numpy.float32)}, completion=done)
    assert done.done and not done.cancelled
    with pytest.raises(RuntimeError, match="completed"):
        done.cancel("too late")


def test_validation_errors_name_the_key():
    model = make_model()
    zeros = numpy.zeros(2, numpy.float32)
    with pytest.raises(ValueError, match="'past'"):
        runtime.PersistentValueState(model, {})
    with pytest.raises(ValueError, match="'request.cache'"):
        runtime.PersistentValueState(model, {"past": zeros, "request.cache": zeros})
    with pytest.raises(ValueError, match="'past'"):
        runtime.PersistentValueState(model, {"past": numpy.zeros(3, numpy.float32)})
    with pytest.raises(TypeError, match="tuple"):
        runtime.PersistentValueState(model, {"past": (0.0, 0.0)})
    with pytest.raises(ValueError, match="past"):
        runtime.PersistentValueState(model, {"past": numpy.zeros(4, numpy.float32)[::2]})
    with pytest.raises(ValueError, match="past"):
        runtime.PersistentValueState(model, {"past": numpy.zeros(2, dtype=">f4")})
    state = runtime.PersistentValueState(model, {"past": zeros})
    with pytest.raises(ValueError, match="override"):
        state.run(make_context(), {"delta": zeros, "past": zeros})
    with pytest.raises(ValueError, match="'delta'"):
        state.run(make_context(), {})
    state.close()
    with pytest.raises(RuntimeError, match="closed"):
        state.run(make_context(), {"delta": zeros})
    with pytest.raises(RuntimeError, match="closed"):
        state.values


def test_duplicate_bindings_and_string_state_are_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        runtime.PersistentValueState(
            make_model(bindings=(("past", "present"), ("past", "present"))),
            {"past": numpy.zeros(2, numpy.float32)},
        )
    strings = make_model(
        '<ir_version: 10, opset_import: ["" : 18]>'
        "g (string[1] past) => (string[1] present) { present = Identity(past) }"
    )
    with pytest.raises(ValueError, match="string"):
        runtime.PersistentValueState(strings, {"past": numpy.array(["a"])})


def test_options_are_copied_at_construction():
    options = runtime.RuntimeSessionOptions(persistent_tensor_initial_capacity=64)
    initial = {"past": numpy.zeros(2, numpy.float32)}
    state = runtime.PersistentValueState(make_model(), initial, options=options)
    options.persistent_tensor_initial_capacity = 0
    ordinary_state = runtime.PersistentValueState(make_model(), initial, options=options)
    assert options.persistent_tensor_initial_capacity == 0
    state.close()
    ordinary_state.close()


def test_independent_states_run_concurrently():
    model = make_model()
    results = {}

    def worker(index):
        context = make_context()
        state = runtime.PersistentValueState(
            model, {"past": numpy.full(2, index, numpy.float32)}
        )
        for _ in range(200):
            state.run(context, {"delta": numpy.ones(2, numpy.float32)})
        results[index] = numpy.from_dlpack(state.values["past"]).tolist()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: [i + 200.0, i + 200.0] for i in range(4)}
