"""runtime.TaskCompletion: single use, cancel from any thread, cancel after publication fails."""
import threading

import pytest

from onnx_light.onnx_py._onnxpykernels import runtime


def test_new_completion_is_pending():
    completion = runtime.TaskCompletion()
    assert not completion.cancelled
    assert not completion.done
    assert completion.state == "pending"


def test_cancel_records_the_first_reason():
    completion = runtime.TaskCompletion()
    completion.cancel("request no longer needed")
    completion.cancel("ignored")
    assert completion.cancelled
    assert completion.done
    assert completion.reason == "request no longer needed"
    assert repr(completion) == "TaskCompletion(cancelled)"


def test_cancel_from_another_thread_is_visible():
    completion = runtime.TaskCompletion()
    worker = threading.Thread(target=completion.cancel, args=("from a thread",))
    worker.start()
    worker.join()
    assert completion.cancelled
    assert completion.reason == "from a thread"


def test_cancel_default_reason():
    completion = runtime.TaskCompletion()
    completion.cancel()
    assert completion.reason == "cancelled"
    with pytest.raises(TypeError):
        completion.cancel(42)
