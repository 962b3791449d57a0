"""An onnxruntime-genai builder model after `prepare`, onnx-light against onnxruntime on the
ORIGINAL file: greedy tokens and every step's last-position logits. Used by
tests/python/test_genai_builder_models.py (tiny and 2-layer real-width builds, in CI) and by
perf/check_genai_real_shapes.py (the full SmolLM2-135M / Qwen2.5-0.5B shapes, by hand).

Tolerance (`Comparison.within`): fp32, logits within 1e-4. int4: the builder writes
MatMulNBits with accuracy_level 4, where onnxruntime quantizes activations to int8; its own
error is the distance of that run from its level-0 run on the same file (the float product
with the same dequantized weights), the largest over the run's steps. On one node and the
same input, onnx-light's MatMulNBits gives onnxruntime's level-4 result within 1e-7. In a
model the activations reaching a node differ by float rounding (~1e-7), and these
random-weight models put many activations exactly on an int8 rounding tie (embeddings
dequantized from 4 bits, norm weights of one), which the two runtimes then round apart: so
onnx-light's logits are not onnxruntime's level-4 logits, and its error from level 0 is of
the same size as onnxruntime's, not always below it (1.04x and 1.05x on the 2-layer
SmolLM2 and Qwen2.5 widths, 0.96-0.98x on the tiny builds, 1.00x and 1.01x on the full
shapes). The check: within INT4_FACTOR (2) times
onnxruntime's own error, plus 1e-4, of the level-0 reference at every step; `format()`
prints the measured ratio. Tokens: onnx-light's greedy tokens equal onnxruntime's. A step
where onnxruntime's top-two logits are closer than twice onnx-light's distance from them is
a near tie (`near_ties`), where either token is right: `same_tokens` compares up to the
first one (the tests ask for every token)."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
import onnxruntime as ort

from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.text import empty_caches, read_settings

FP32_TOLERANCE = 1e-4
INT4_FACTOR = 2.0


@dataclasses.dataclass
class Comparison:
    precision: str
    ours: list            # onnx-light's greedy tokens (after the prompt)
    theirs: list          # onnxruntime's (accuracy_level as written)
    differences: list     # per step: max |onnx-light - reference| of the last-position logits
    tolerances: list      # per step: the allowed difference
    own_error: float      # int4: onnxruntime's level 4 from its level 0 (max over steps)
    near_ties: list       # steps where the two runtimes' argmax may rightly differ

    @property
    def within(self) -> bool:
        return all(d <= t for d, t in zip(self.differences, self.tolerances))

    @property
    def same_tokens(self) -> bool:
        """Equal up to the first near tie (after it the sequences may rightly part)."""
        end = min(self.near_ties, default=len(self.theirs))
        return self.ours[:end] == self.theirs[:end]

    def format(self) -> str:
        worst = max(range(len(self.differences)),
                    key=lambda s: self.differences[s] / self.tolerances[s])
        ratio = "" if self.precision == "fp32" else (
            f"; largest int4 error {max(self.differences):.3g} = "
            f"{max(self.differences) / self.own_error:.2f}x onnxruntime's own "
            f"{self.own_error:.3g}")
        return (f"{self.precision}: same greedy tokens {self.same_tokens} "
                f"({sum(a == b for a, b in zip(self.ours, self.theirs))}/{len(self.theirs)} "
                f"equal, near ties at steps {self.near_ties or 'none'}); logits within "
                f"tolerance at every step {self.within} (worst step {worst}: "
                f"{self.differences[worst]:.3g} <= {self.tolerances[worst]:.3g}){ratio}")


def ort_session(path, accuracy_level=None):
    """onnxruntime on the file, or on a copy with every MatMulNBits at `accuracy_level`."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if accuracy_level is None:
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    model = onnx.load(path)
    for node in model.graph.node:
        for a in node.attribute:
            if node.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = accuracy_level
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _ort_run(session, cache, prompt, new_tokens, forced=None):
    """Greedy tokens (or the `forced` ones fed instead) and the last-position logits of the
    prompt call and of one call per later token, the presents fed back."""
    names = [o.name for o in session.get_outputs()]
    ids, total, tokens, logits = prompt, 0, [], []
    for step in range(new_tokens):
        total += ids.shape[1]
        out = dict(zip(names, session.run(names, {
            "input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **cache})))
        logits.append(out["logits"][0, -1].astype(np.float32))
        tokens.append(int(logits[-1].argmax()) if forced is None else forced[step])
        ids = np.array([[tokens[-1]]], np.int64)
        cache = {k: out[k.replace("past_key_values.", "present.")] for k in cache}
    return tokens, logits


def _ol_steps(model, context, cache, tokens):
    state = runtime.PersistentValueState(model, cache)
    total, logits = 0, []
    try:
        for ids in tokens:
            total += ids.shape[1]
            out = state.run(context, {"input_ids": ids,
                                      "attention_mask": np.ones((1, total), np.int64)},
                            output_names=["logits"])
            logits.append(np.from_dlpack(out["logits"])[0, -1].astype(np.float32))
    finally:
        state.close()
    return logits


def compare(path: str, prompt_length: int = 6, new_tokens: int = 8, seed: int = 7,
            threads: int = 2) -> Comparison:
    """Prepares `path` (bind auto, written beside it and removed after) and compares."""
    precision = "int4" if any(n.op_type == "MatMulNBits" for n in
                              onnx.load(path, load_external_data=False).graph.node) else "fp32"
    prepared = os.path.join(os.path.dirname(path), f"prepared-compare-{os.getpid()}.onnx")
    try:
        prepare.prepare_decoder(path, prepared, bind="auto")
        model = ol_onnx.load_model(prepared)
    finally:
        if os.path.exists(prepared):
            os.remove(prepared)
    cache = empty_caches(model, read_settings(os.path.dirname(path)).head_size)
    vocab_floor = 3  # past the builder tokenizer's special tokens
    prompt = np.random.default_rng(seed).integers(vocab_floor, 120, (1, prompt_length),
                                                  dtype=np.int64)
    theirs, their_logits = _ort_run(ort_session(path), cache, prompt, new_tokens)
    tokens = [prompt] + [np.array([[t]], np.int64) for t in theirs[:-1]]
    own = 0.0
    if precision == "fp32":
        reference, tolerances = their_logits, [FP32_TOLERANCE] * new_tokens
    else:
        _, reference = _ort_run(ort_session(path, accuracy_level=0), cache, prompt, new_tokens,
                                forced=theirs)
        # onnxruntime's own error over the run; its int8 rounding is not onnx-light's, so
        # either error may be the larger at one step, or over a run (INT4_FACTOR).
        own = max(float(np.abs(q - r).max()) for q, r in zip(their_logits, reference))
        tolerances = [INT4_FACTOR * own + FP32_TOLERANCE] * new_tokens

    options = runtime.RuntimeSessionOptions(intra_op_threads=threads)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
    session = runtime.RuntimeSession(model, options)
    ours = np.from_dlpack(runtime.generate(
        session, context, {"input_ids": prompt, **cache},
        runtime.GenerationOptions(max_new_tokens=new_tokens)))[0, prompt_length:].tolist()
    our_logits = _ol_steps(session, context, cache, tokens)
    differences = [float(np.abs(a - r).max()) for a, r in zip(our_logits, reference)]
    # Where onnxruntime's top-two gap is below twice onnx-light's distance from its logits,
    # the argmax may rightly differ.
    near_ties = [s for s, (a, b) in enumerate(zip(our_logits, their_logits))
                 if np.diff(np.sort(b)[-2:])[0] < 2 * float(np.abs(a - b).max())]
    return Comparison(precision, ours, theirs, differences, tolerances, own, near_ties)
