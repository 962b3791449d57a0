"""Merged decoders as Hugging Face Optimum wrote them (`decoder_model_merged.onnx`, what many
Hub repositories ship, transformers.js's among them): the decoder without a past and the one
with a past, exported by the TorchScript exporter from the same weights, joined by one `If` on
a BOOL [1] input `use_cache_branch` (then: the with-past graph; else: the no-past graph, which
ignores the past inputs), the initializers both branches share stored once in the outer
graph. Written here from that description (Optimum is not a dependency)."""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import warnings

from models import export_hf


def _no_past(model, layers: int):
    """input_ids, attention_mask, position_ids -> logits, present.*: the first step."""
    import torch
    from transformers import DynamicCache

    class NoPast(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=DynamicCache(),
                             use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return NoPast(model)


def export_no_past(model, path: str) -> None:
    import torch

    layers = model.config.num_hidden_layers
    names = export_hf.cache_names(layers)
    dynamic = {"input_ids": {0: "batch_size", 1: "sequence_length"},
               "attention_mask": {0: "batch_size", 1: "sequence_length"},
               "position_ids": {0: "batch_size", 1: "sequence_length"},
               "logits": {0: "batch_size", 1: "sequence_length"}}
    for _, present in names:
        dynamic[present] = {0: "batch_size", 2: "sequence_length"}
    batch, seq = 2, 3
    args = (torch.randint(0, model.config.vocab_size, (batch, seq)),
            torch.ones(batch, seq, dtype=torch.int64),
            torch.arange(seq).expand(batch, seq).contiguous())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_no_past(model, layers).eval(), args, path, dynamo=False,
                          opset_version=17,
                          input_names=["input_ids", "attention_mask", "position_ids"],
                          output_names=["logits"] + [q for _, q in names],
                          dynamic_axes=dynamic)


def _content_key(tensor) -> tuple:
    from onnx import numpy_helper

    return (tensor.data_type, tuple(tensor.dims), numpy_helper.to_array(tensor).tobytes())


def merge(no_past, with_past, condition: str = "use_cache_branch"):
    """The merged ModelProto of two loaded decoders (weights in memory)."""
    from onnx import TensorProto, helper

    shared, outer = {}, []  # content -> the one outer name; the outer initializers
    for model in (no_past, with_past):
        names = {}
        for t in model.graph.initializer:
            key = _content_key(t)
            if key not in shared:
                shared[key] = f"{t.name}_merged"
                outer.append(t)
            names[t.name] = shared[key]
        for node in model.graph.node:
            for i, name in enumerate(node.input):
                node.input[i] = names.get(name, name)
    for t in outer:
        t.name = shared[_content_key(t)]
    branches = [helper.make_graph(list(m.graph.node), label, [], list(m.graph.output))
                for m, label in ((no_past, "no_past"), (with_past, "with_past"))]
    inputs, seen = [], set()
    for model in (no_past, with_past):
        for i in model.graph.input:
            if i.name not in seen:
                seen.add(i.name)
                inputs.append(i)
    inputs.append(helper.make_tensor_value_info(condition, TensorProto.BOOL, [1]))
    node = helper.make_node("If", [condition], [o.name for o in with_past.graph.output],
                            name="optimum::if", then_branch=branches[1],
                            else_branch=branches[0])
    graph = helper.make_graph([node], "merged", inputs, list(with_past.graph.output), outer)
    return helper.make_model(graph, opset_imports=list(with_past.opset_import),
                             producer_name="optimum-onnx")


def ensure(arch: str, size: str = "tiny", out_dir: str = export_hf.MODEL_DIR) -> str:
    """Path of the merged decoder of `arch` in the named config, built if not cached."""
    import onnx
    from importlib.metadata import version

    source = "".join(inspect.getsource(f) for f in (_no_past, export_no_past, merge,
                                                     export_hf.export_torchscript))
    key = hashlib.sha256(json.dumps([arch, export_hf.CONFIGS[(arch, size)],
                                     version("torch"), version("transformers"), source],
                                    sort_keys=True).encode()).hexdigest()[:12]
    name = f"{size}_{arch}_merged-{key}.onnx"
    path = os.path.join(out_dir, name)
    if os.path.exists(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, f".tmp-{os.getpid()}-{name}")
    export_no_past(export_hf.build(arch, size), tmp + ".no_past.onnx")
    export_hf.export_torchscript(export_hf.build(arch, size), tmp + ".with_past.onnx")
    merged = merge(onnx.load(tmp + ".no_past.onnx"), onnx.load(tmp + ".with_past.onnx"))
    if merged.ByteSize() < 2**31 - 2**20:  # the checker serializes the whole model
        onnx.checker.check_model(merged)
    for suffix in (".no_past.onnx", ".with_past.onnx"):
        for extra in ("", ".data"):
            if os.path.exists(tmp + suffix + extra):
                os.remove(tmp + suffix + extra)
    onnx.save(merged, tmp, save_as_external_data=True, location=name + ".data")
    os.replace(tmp, path)
    return path
