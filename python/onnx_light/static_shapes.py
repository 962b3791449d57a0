"""Answers, at prepare time, what a decoder export computes at run time but the declared
types already fix: the exports of torch's TorchScript exporter (Hugging Face Optimum's, most
decoders on the Hub) read `Shape` and `Gather` of every intermediate for the head count and
head size of each view, and keep transformers' no-op casts (`softmax(dtype=float32)`,
`.to(input_dtype)` on FLOAT). Each is a kernel call every step, and the constant bounds
they hide keep the plan from fusing the rotary embedding.

``fold_static_shapes(model)`` runs ONNX shape inference (the ``onnx`` package; without it
nothing changes) and rewrites the main graph in place:

- ``Gather(Shape(x), i)`` with i a constant index (axis 0) of a dimension of x that the
  inferred type fixes becomes a Constant of that value; a Shape left without readers goes;
- ``Gather(Shape(x), i)`` of a dimension inferred as a symbol (``batch_size``,
  ``sequence_length``, ``total_sequence_length``) that a non-bound graph input declares
  becomes one ``Gather(Shape(input), axis)`` shared by every layer's reads, so the plan
  merges the Unsqueezes and Concats built from them (the SmolLM2 shape: 1753 -> 952 kernels
  a decode step). A symbol is a promise of the export's declaration: the feeds it names
  must agree, as the exported graph itself requires;
- ``Cast(x, to=T)`` with x already of type T goes, its readers reading x (not when its
  output is a graph output or read inside a subgraph).

Dimensions no input declares stay computed at run time; nothing else changes. Inference sees
com.microsoft ``MatMulNBits`` and ``MatMulBnb4`` (the Hub's 4-bit files) as a MatMul by a
[K, N] operand, which has their output shape: onnx has no schema for them.
"""
from __future__ import annotations

from typing import Optional


def _inferred_types(model) -> Optional[dict]:
    """name -> TypeProto.tensor_type after onnx shape inference, or None (no onnx package, or
    inference failed: then the model is left as it is)."""
    try:
        import onnx
        from onnx import shape_inference
    except ImportError:
        return None
    proto = onnx.ModelProto()
    proto.ParseFromString(model.SerializeToString())
    _stand_ins(proto)
    try:
        inferred = shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - an export inference cannot follow keeps its graph
        return None
    graph = inferred.graph
    return {v.name: v.type.tensor_type
            for v in [*graph.input, *graph.value_info, *graph.output]
            if v.type.HasField("tensor_type")}


# com.microsoft products whose output is A's shape with its last axis N (attribute N): onnx
# has no schema for them, so inference would stop at every one (the q/k/v projections of a
# Hub q4 file) and leave the head sizes the rotary embedding's Slices read unknown.
_PRODUCTS = {"MatMulNBits": 2, "MatMulBnb4": 2}  # op -> input index of A's type (scales)


def _stand_ins(proto) -> None:
    """Replaces each such product in the (copied) model by MatMul(A, an undefined [K, N]
    input of its type): the same output type and shape for inference."""
    from onnx import TensorProto, helper

    graph = proto.graph
    types = {t.name: t.data_type for t in graph.initializer}
    types.update({i.name: i.type.tensor_type.elem_type for i in graph.input})
    for index, node in enumerate(graph.node):
        typed = _PRODUCTS.get(node.op_type)
        if node.domain != "com.microsoft" or typed is None or len(node.input) <= typed:
            continue
        attrs = {a.name: a.i for a in node.attribute}
        elem = types.get(node.input[typed], TensorProto.UNDEFINED)
        if "K" not in attrs or "N" not in attrs or elem == TensorProto.UNDEFINED:
            continue
        stub = f"__stand_in_{index}"
        graph.input.append(helper.make_tensor_value_info(stub, elem, [attrs["K"], attrs["N"]]))
        node.CopyFrom(helper.make_node("MatMul", [node.input[0], stub], list(node.output),
                                       name=node.name))


def _captured(graph) -> set:
    """Names read inside the graph's subgraphs (If/Loop/Scan bodies)."""
    names: set = set()

    def walk(g):
        for n in g.node:
            for a in n.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    for m in sub.node:
                        names.update(m.input)
                    walk(sub)

    walk(graph)
    return names


def _dim(types: dict, name: str, index: int):
    """Dimension `index` (negative: from the end) of `name`'s inferred shape, or None."""
    t = types.get(name)
    if t is None or not t.HasField("shape"):
        return None
    dims = t.shape.dim
    k = index + len(dims) if index < 0 else index
    return dims[k] if 0 <= k < len(dims) else None


def _static_dim(types: dict, name: str, index: int) -> Optional[int]:
    d = _dim(types, name, index)
    return int(d.dim_value) if d is not None and d.HasField("dim_value") else None


def _symbolic_dim(types: dict, name: str, index: int) -> Optional[str]:
    d = _dim(types, name, index)
    return d.dim_param or None if d is not None and d.HasField("dim_param") else None


def _merge_whole_shapes(nodes: list, protected: set) -> int:
    """Shapes (no start/end) of one value, beyond the first, removed from `nodes` in place,
    their readers reading the first's output; returns how many went."""
    first, rename, gone = {}, {}, []
    for at, n in enumerate(nodes):
        if (n.op_type != "Shape" or n.domain not in ("", "ai.onnx") or len(n.attribute)
                or len(n.input) != 1 or n.output[0] in protected):
            continue
        if n.input[0] in first:
            rename[n.output[0]] = first[n.input[0]]
            gone.append(at)
        else:
            first[n.input[0]] = n.output[0]
    for n in nodes:
        for i, x in enumerate(n.input):
            n.input[i] = rename.get(x, x)
    for at in reversed(gone):
        del nodes[at]
    return len(gone)


class _InputDims:
    """One ``Gather(Shape(input), j)`` per (input, axis, scalar or [1]) read, its nodes put
    first in the graph (they read only a graph input and a constant)."""

    def __init__(self, graph, protos):
        from onnx_light.prepare import _names_in_graph

        self.protos, self.nodes, self.made = protos, [], {}
        taken: set = set()
        _names_in_graph(graph, taken)
        self.prefix = "static_dim"
        while any(t.startswith(self.prefix) for t in taken):
            self.prefix += "_"
        self.prefix += "/"

    def _node(self, key, op_type, inputs, hint, **attrs):
        if key not in self.made:
            out = f"{self.prefix}{hint}"
            self.nodes.append(self.protos.node(op_type, inputs, [out], out, **attrs))
            self.made[key] = out
        return self.made[key]

    def read(self, source: str, axis: int, scalar: bool) -> str:
        shape = self._node(("shape", source), "Shape", [source], f"{source}_shape")
        dims = [] if scalar else [1]
        index = self._node(("index", axis, scalar), "Constant", [], f"index{axis}_{int(scalar)}",
                           value=(dims, [axis]))
        return self._node(("dim", source, axis, scalar), "Gather", [shape, index],
                          f"{source}_dim{axis}_{int(scalar)}", axis=0)


def fold_static_shapes(model, bound=()) -> Optional[tuple]:
    """(Shape reads folded, no-op Casts removed, Shape reads shared), or None when shape
    inference is not available (the ``onnx`` package) or fails on the model. `bound`: the
    inputs that become persistent (never read for a dimension here)."""
    from onnx_light.prepare import _constant_indices, _Protos, input_symbols

    types = _inferred_types(model)
    if types is None:
        return None
    graph, protos = model.graph, _Protos(model)
    producer = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    captured = _captured(graph)
    initialized = {t.name for t in graph.initializer}
    symbols = {s: src for s, src in input_symbols(graph, set(bound)).items()
               if src[0] not in initialized}
    shared = _InputDims(graph, protos)
    folded, rename, dropped = 0, {}, set()  # dropped: node indices (wrappers are not stable)
    graph_ops = [n.op_type for n in graph.node]
    for at, n in enumerate(graph.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "Gather" and len(n.input) == 2:
            shape = producer.get(n.input[0])
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            index = _constant_indices(graph, n.input[1])
            if (shape is None or shape.op_type != "Shape" or shape.domain not in ("", "ai.onnx")
                    or len(shape.attribute) or axis != 0 or index is None
                    or len(index[0]) != 1):
                continue
            value = _static_dim(types, shape.input[0], index[0][0])
            if value is None:
                # A symbolic dimension a graph input declares: read there, one Gather for
                # every layer's (which then share their Unsqueezes and Concats).
                source = symbols.get(_symbolic_dim(types, shape.input[0], index[0][0]))
                if source is None or n.output[0] in outputs or n.output[0] in captured \
                        or source[0] == shape.input[0]:
                    continue
                rename[n.output[0]] = shared.read(source[0], source[1], index[1])
                dropped.add(at)
                continue
            dims = [] if index[1] else [1]
            n.CopyFrom(protos.node("Constant", [], [n.output[0]], n.name or n.output[0],
                                   value=(dims, [value])))
            folded += 1
        elif n.op_type == "Cast" and len(n.input) == 1:
            to = next((a.i for a in n.attribute if a.name == "to"), None)
            source = types.get(n.input[0])
            if (to is None or source is None or source.elem_type != to
                    or n.output[0] in outputs or n.output[0] in captured):
                continue
            rename[n.output[0]] = n.input[0]
            dropped.add(at)
    if rename:
        for n in graph.node:
            for i, x in enumerate(n.input):
                while x in rename:
                    x = rename[x]
                n.input[i] = x
    kept = [n for at, n in enumerate(graph.node) if at not in dropped]
    read = {x for n in kept for x in n.input} | outputs | captured
    keep = shared.nodes + [n for n in kept
                           if not (n.op_type == "Shape" and n.domain in ("", "ai.onnx")
                                   and n.output[0] not in read)]
    merged = _merge_whole_shapes(keep, outputs | captured)
    if len(keep) != len(graph.node) or shared.nodes or merged:
        del graph.node[:]
        graph.node.extend(keep)
    casts = sum(1 for at in dropped if graph_ops[at] == "Cast")
    return folded, casts, len(dropped) - casts
