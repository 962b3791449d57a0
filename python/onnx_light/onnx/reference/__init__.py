"""ReferenceEvaluator: run or generate with a model in the native runtime.

    from onnx_light.onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    outputs = evaluator.run(None, {"x": x})              # list of NumPy arrays
    tokens = evaluator.generate({"input_ids": ids, **initial_empty_caches},
                                max_new_tokens=32, temperature=0.7, seed=42, eos_token_id=2)
"""
from __future__ import annotations

import numpy as np

from onnx_light.onnx_py._onnxpykernels import runtime


class ReferenceEvaluator:
    def __init__(self, model, opset: int | None = None):
        self.model = model
        opsets = {o.domain: o.version for o in model.opset_import}
        if opset is not None:
            opsets[""] = opset
        self.context = runtime.RuntimeContext(runtime.KernelContext(opsets))
        self._session = None

    def run(self, output_names, feeds: dict) -> list:
        """Outputs as NumPy arrays (zero-copy views), in graph order or `output_names` order."""
        if self._session is None:
            self._session = runtime.RuntimeSession(self.model)
        outputs = self._session.run(self.context, feeds)
        names = output_names or [o.name for o in self.model.graph.output]
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
        result = runtime.generate(self.model, self.context, feeds, generation, session_options,
                                  on_token=on_token)
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
