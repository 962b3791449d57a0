"""ReferenceEvaluator: run or generate with a model in the native runtime.

    from onnx_light.onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    outputs = evaluator.run(None, {"x": x})              # list of NumPy arrays
    tokens = evaluator.generate({"input_ids": ids, **initial_empty_caches},
                                max_new_tokens=32, temperature=0.7, seed=42, eos_token_id=2)
"""
from __future__ import annotations

import numpy as np

from onnx_light.onnx_py._onnxpykernels import proto as _proto
from onnx_light.onnx_py._onnxpykernels import runtime


class ReferenceEvaluator:
    def __init__(self, model, opset: int | None = None):
        self.model = model
        opsets = {o.domain: o.version for o in model.opset_import}
        if opset is not None:
            opsets[""] = opset
        self.context = runtime.RuntimeContext(runtime.KernelContext(opsets))
        self._session = None

    def session(self):
        """The model's compiled session. For an onnx_light ModelProto it is
        runtime.cached_session(model): one per model object, shared with runtime.generate and
        other evaluators of the same object, compiled again after the model is changed from
        Python. Other models (bytes, an `onnx` ModelProto) are compiled once per evaluator."""
        if self._session is None or isinstance(self.model, _proto.ModelProto):
            self._session = runtime.cached_session(self.model)  # O(1) when nothing changed
        return self._session

    def run(self, output_names, feeds: dict) -> list:
        """Outputs as NumPy arrays (zero-copy views), in graph order or `output_names` order."""
        names = list(output_names) if output_names else None
        outputs = self.session().run(self.context, feeds, names)
        names = names or [o.name for o in self.model.graph.output]
        return [_to_numpy(outputs[name]) for name in names]

    def generate(self, feeds: dict, max_new_tokens: int = 32, temperature: float = 0.0,
                 seed: int | None = None, eos_token_id: int | None = None,
                 pad_token_id: int | None = None, **options) -> np.ndarray:
        """INT64 [batch, prompt_length + generated_length] tokens, including the prompt.

        Extra keyword options: top_k, top_p, repetition_penalty, stop_token_ids and the
        input/output names (see runtime.GenerationOptions); on_token=callable(step, tokens)
        streams tokens and may return False to stop."""
        on_token = options.pop("on_token", None)
        session_options = options.pop("session_options", None)
        generation = runtime.GenerationOptions(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
            eos_token_id=eos_token_id, pad_token_id=pad_token_id, **options)
        # One compiled session per model object: repeated calls do not plan the model again.
        if session_options is None:
            result = runtime.generate(self.session(), self.context, feeds, generation,
                                      on_token=on_token)
        else:
            result = runtime.generate(self.model, self.context, feeds, generation,
                                      session_options, on_token=on_token)
        return np.from_dlpack(result)


def _to_numpy(value):
    if isinstance(value, list):
        return [_to_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    try:
        return np.from_dlpack(value)
    except (TypeError, BufferError, AttributeError):
        return value
