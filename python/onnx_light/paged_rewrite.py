"""prepare --paged: an exported decoder's attention rewritten onto ai.rt::PagedAttention.

For every layer whose caches are bound (past_key_values.N.key/value -> present.N.key/value):

    present_k = Concat(past_k, k_new, axis=2)        present_v = Concat(past_v, v_new, axis=2)
    scores = MatMul(q [* c], layout(present_k) [* c]) [+ mask]   (layout: the GQA head repeat
    probs = Softmax(scores, -1) [Where(IsNaN) guard]              Unsqueeze/Expand/Reshape and
    y = MatMul(probs, layout(present_v))                          the K transpose)

becomes ``y, present_N = ai.rt::PagedAttention(q, k_new, v_new, past_N)`` with one paged cache
per layer (or, with ``rows=True``, a sequence of row caches, one per batch row: the form the
batched RequestScheduler steps). The export's mask is dropped: PagedAttention is causal over
each row's own cached tokens, which is what the mask computes when the attention mask is all
ones (no padding); a mask that keeps each query to the last w keys (a sliding window, read by
running the mask's subgraph at max_tokens keys) becomes left_window_size w - 1. So the rewrite is checked by numbers, not by structure: ``verify`` runs the
original on onnxruntime and on onnx-light and the rewrite on onnx-light, a prompt and decode
steps with the caches fed back, and the logits must agree. Nodes left without readers (the mask subgraph,
Shape reads of the old caches) are removed; an input left unread (attention_mask) is dropped.
Anything else that still reads an old cache is refused, naming the node.

onnxruntime-genai's builds (fp32 and int4) hold each layer's attention in one
com.microsoft GroupQueryAttention node instead, with the rotary embedding inside it
(do_rotary) and the positions taken from the attention mask. That node becomes

    q, k, v = Split(Reshape(packed qkv, [0, 0, heads + 2 kv_heads, -1]))   (or three Reshapes)
    q, k = com.microsoft.RotaryEmbedding(Transpose(q | k), position_ids, cos_cache, sin_cache)
    y = Reshape(Transpose(ai.rt::PagedAttention(q, k, v, past_N)), [0, 0, -1])

with a new input position_ids (what the torch exports take, and what generate and the
scheduler feed); local_window_size w keeps the last w keys as left_window_size w - 1, and a
soft cap is refused.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

LAYOUT_OPS = {"Unsqueeze", "Expand", "Reshape", "Transpose"}
_ATTR_INT = 2  # AttributeProto.INT


class PagedRewriteError(ValueError):
    """The export's attention does not have the form the rewrite knows."""


@dataclass
class Layer:
    past_key: str
    past_value: str
    present_key: str
    present_value: str
    head_size: Optional[int] = None  # found by the rewrite where the inputs leave it symbolic
    window: int = 0  # keys a query sees (its own included) when the export's mask slides; 0: all

    @property
    def past(self) -> str:
        return self.past_key[: -len(".key")] if self.past_key.endswith(".key") else \
            self.past_key + "_cache"

    @property
    def present(self) -> str:
        return self.present_key[: -len(".key")] if self.present_key.endswith(".key") else \
            self.present_key + "_cache"


def layers_of(pairs) -> list:
    """Pairs (past, present) grouped by layer: each '.key' pair with its '.value' pair."""
    by_past = dict(pairs)
    layers = []
    for past, present in pairs:
        if not past.endswith(".key"):
            continue
        value = past[: -len(".key")] + ".value"
        if value not in by_past:
            raise PagedRewriteError(f"cache '{past}' has no value cache '{value}' bound")
        layers.append(Layer(past, value, present, by_past[value]))
    if 2 * len(layers) != len(pairs):
        loose = sorted(set(by_past) - {n for l in layers for n in (l.past_key, l.past_value)})
        raise PagedRewriteError(f"bound inputs {loose} are not key/value caches of a layer "
                                f"(names ending in .key / .value)")
    return layers


class _Graph:
    def __init__(self, graph):
        self.graph = graph
        self.index()

    def index(self):
        self.producer, self.consumers = {}, {}
        for n in self.graph.node:
            for o in n.output:
                self.producer[o] = n
            for x in n.input:
                self.consumers.setdefault(x, []).append(n)
        self.constants = {t.name: t for t in self.graph.initializer}
        for n in self.graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.constants[n.output[0]] = n.attribute[0].t

    def made_by(self, name, op):
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op and n.domain in ("", "ai.onnx") else None

    def scalar(self, name) -> Optional[float]:
        t = self.constants.get(name)
        if t is None:
            return None
        values = _tensor_values(t)
        return float(values.reshape(-1)[0]) if values.size == 1 else None


def _tensor_values(t) -> np.ndarray:
    """A small FLOAT/DOUBLE/INT64 initializer's values (scales, axes)."""
    if t.float_data:
        return np.array(t.float_data, np.float32)
    if t.double_data:
        return np.array(t.double_data, np.float64)
    if t.int64_data:
        return np.array(t.int64_data, np.int64)
    dtype = {1: np.float32, 10: np.float16, 11: np.float64, 7: np.int64, 6: np.int32}.get(t.data_type)
    if dtype is None or not t.raw_data:
        return np.zeros(0, np.float32)
    return np.frombuffer(t.raw_data, dtype)


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return a
    return default


def _unscaled(g: _Graph, name: str):
    """(x, c) for x * c or c * x with a scalar constant c (also x / c), else (name, 1)."""
    for op in ("Mul", "Div"):
        n = g.made_by(name, op)
        if n is None:
            continue
        for side in (0, 1) if op == "Mul" else (1,):
            c = g.scalar(n.input[side])
            if c is not None:
                return n.input[1 - side], (c if op == "Mul" else 1.0 / c)
    return name, 1.0


def _back_to(g: _Graph, name: str, target: str) -> Optional[float]:
    """The product of the scalar factors on a path of layout nodes from `target` to `name`
    (None when `name` is not `target` seen through layout ops and scalar Muls)."""
    scale = 1.0
    for _ in range(32):
        if name == target:
            return scale
        name, c = _unscaled(g, name)
        scale *= c
        if name == target:
            return scale
        n = g.producer.get(name)
        if n is None or n.op_type not in LAYOUT_OPS:
            return None
        name = n.input[0]
    return None


def _passes_through(g: _Graph, name: str, past: str) -> bool:
    """`name` is `past` itself or `past` through one-input Concats and Identities (the
    TorchScript exporter wraps the past in a Concat of one input)."""
    for _ in range(8):
        if name == past:
            return True
        n = g.producer.get(name)
        if n is None or n.op_type not in ("Concat", "Identity") or len(n.input) != 1:
            return False
        name = n.input[0]
    return False


def _concat_of(g: _Graph, present: str, past: str) -> str:
    n = g.made_by(present, "Concat")
    axis = _attr(n, "axis") if n is not None else None
    if n is None or len(n.input) != 2 or not _passes_through(g, n.input[0], past) or \
            axis is None or axis.i not in (2, -2):
        raise PagedRewriteError(f"'{present}' is not Concat('{past}', new, axis=2): the rewrite "
                                f"needs the exporter's cache append")
    return n.input[1]


def _answer_shape_reads(g: _Graph, present: str, like: str) -> None:
    """The TorchScript exporter reads dimensions of the cache (and of its head repeat) with
    Shape nodes, and some of those reads outlive the rewrite (the attention output's Reshape
    takes the head size from the repeated V). `present` [B, Hkv, T, D] shares dims 0 and 3
    with `like` (q [B, H, L, D] for keys, the attention output for values), its head repeat
    [B, H, T, D] dims 0, 1 and 3: a Shape read only through Gathers of those dims reads
    `like` instead. Other reads are left (the rewrite is then refused as before)."""
    def gathers_only(shape_node, allowed):
        for c in g.consumers.get(shape_node.output[0], []):
            if c.op_type != "Gather" or c.input[0] != shape_node.output[0]:
                return False
            idx = g.constants.get(c.input[1])
            values = _tensor_values(idx) if idx is not None else np.zeros(0)
            if values.size != 1 or int(values.reshape(-1)[0]) % 4 not in allowed:
                return False
        return True

    repeated = None
    for u in g.consumers.get(present, []):
        if u.op_type != "Unsqueeze":
            continue
        for e in g.consumers.get(u.output[0], []):
            if e.op_type != "Expand":
                continue
            for r in g.consumers.get(e.output[0], []):
                if r.op_type == "Reshape" and r.input[0] == e.output[0]:
                    repeated = r.output[0]
    for source, allowed in ((present, {0, 3}), (repeated, {0, 1, 3})):
        if source is None:
            continue
        for n in list(g.consumers.get(source, [])):
            if n.op_type == "Shape" and not n.attribute and gathers_only(n, allowed):
                n.input[0] = like


def _value_matmul(g: _Graph, present_v: str):
    """The MatMul(probs, layout(present_v)) of the layer."""
    frontier, found = [present_v], []
    while frontier:
        name = frontier.pop()
        for c in g.consumers.get(name, []):
            if c.op_type == "MatMul" and c.input[1] == name:
                found.append(c)
            elif c.op_type in ("Unsqueeze", "Expand", "Reshape") and c.input[0] == name:
                frontier.append(c.output[0])
    if len(found) != 1:
        raise PagedRewriteError(f"found {len(found)} MatMuls reading '{present_v}' as values "
                                f"(through the head repeat); the rewrite needs exactly one")
    return found[0]


def _scores_matmul(g: _Graph, m2):
    """(qk MatMul, scale on the scores, the added mask or None) behind MatMul(probs, V)."""
    probs = m2.input[0]
    where = g.made_by(probs, "Where")
    if where is not None and g.made_by(where.input[0], "IsNaN") is not None:
        probs = where.input[2]
    softmax = g.made_by(probs, "Softmax")
    axis = _attr(softmax, "axis") if softmax is not None else None
    if softmax is None or axis is None or axis.i not in (-1, 3):
        raise PagedRewriteError(f"MatMul node '{m2.name}' does not read Softmax(axis=-1) "
                                f"probabilities")
    scores, scale = _unscaled(g, softmax.input[0])
    add, mask = g.made_by(scores, "Add"), None
    if add is not None:  # + mask: dropped (PagedAttention is causal; _slide_windows reads it)
        for side in (0, 1):
            if g.made_by(add.input[side], "MatMul") is not None or \
                    g.made_by(_unscaled(g, add.input[side])[0], "MatMul") is not None:
                scores, c = _unscaled(g, add.input[side])
                scale *= c
                mask = add.input[1 - side]
                break
    qk = g.made_by(scores, "MatMul")
    if qk is None:
        raise PagedRewriteError(f"Softmax node '{softmax.name}' does not read MatMul(q, k) "
                                f"scores (plus a mask)")
    return qk, scale, mask


def rewrite(model, pairs, rows: bool = False, max_tokens: int = 4096,
            model_dir: Optional[str] = None) -> list:
    """Rewrites `model` (an onnx_light.onnx ModelProto, in place) and returns the layers.
    model_dir: where the model's external data files are (the mask check reads the ones its
    subgraph needs)."""
    graph = model.graph
    layers = layers_of(pairs)
    g = _Graph(graph)
    declared = {i.name: i for i in graph.input}
    replaced, positions, masks, nodes = [], False, {}, {}
    for layer in layers:
        gqa = _gqa_of(g, layer)
        if gqa is not None:
            positions |= _rewrite_gqa(model, g, layer, gqa, max_tokens)
            replaced.append(gqa)
            continue
        k_new = _concat_of(g, layer.present_key, layer.past_key)
        v_new = _concat_of(g, layer.present_value, layer.past_value)
        m2 = _value_matmul(g, layer.present_value)
        qk, scale, masks[layer.past] = _scores_matmul(g, m2)
        q, q_scale = _unscaled(g, qk.input[0])
        k_scale = _back_to(g, qk.input[1], layer.present_key)
        if k_scale is None:
            raise PagedRewriteError(f"MatMul node '{qk.name}' does not read '{layer.present_key}'"
                                    f" through the head repeat and transpose")
        dims = declared[layer.past_key].type.tensor_type.shape.dim
        if len(dims) != 4 or not dims[3].HasField("dim_value"):
            raise PagedRewriteError(f"input '{layer.past_key}' needs a declared head size "
                                    f"(dimension 3)")
        head = dims[3].dim_value
        total = scale * q_scale * k_scale
        if not math.isclose(total, 1.0 / math.sqrt(head), rel_tol=1e-6):
            factor = f"{layer.past}/q_scale"
            graph.initializer.add().CopyFrom(_scalar(model, factor, total * math.sqrt(head)))
            scaled = graph.node.add(op_type="Mul", name=f"{layer.past}/scale_q",
                                    input=[q, factor], output=[f"{layer.past}/q_scaled"])
            q = scaled.output[0]
        node = graph.node.add(op_type="PagedAttention", domain="ai.rt",
                              name=f"{layer.past}/paged_attention",
                              input=[q, k_new, v_new, layer.past],
                              output=[m2.output[0], layer.present])
        node.attribute.add(name="max_tokens", i=max_tokens, type=_ATTR_INT)
        nodes[layer.past] = node
        replaced += [m2, g.producer[layer.present_key], g.producer[layer.present_value]]
        _answer_shape_reads(g, layer.present_key, q)
        _answer_shape_reads(g, layer.present_value, m2.output[0])
    _slide_windows(model, layers, masks, nodes, max_tokens, model_dir)
    if positions:
        _declare_positions(graph)
    _swap_io(model, layers, rows)
    _remove(graph, replaced)
    _topological_sort(graph)
    _remove_dead(graph)
    return layers


def _slide_windows(model, layers, masks, nodes, max_tokens: int,
                   model_dir: Optional[str] = None) -> None:
    """Sets left_window_size on the PagedAttention of every layer whose export's mask slides:
    a mask is kept to the last w keys only where it says so at a long cache, which the logits
    check (a few tokens) cannot see. Each mask's subgraph is run alone for one query at the
    last position PagedAttention keeps (max_tokens); the keys it lets through must be all of
    them (causal) or the last w (left_window_size w - 1), else the rewrite is refused."""
    masks = {past: mask for past, mask in masks.items() if mask is not None}
    if not masks:
        return
    seen = _mask_rows(model, sorted(set(masks.values())), max_tokens, model_dir)
    for layer in layers:
        mask = masks.get(layer.past)
        if mask is None:
            continue
        allowed = seen[mask]
        w = int(allowed.sum())
        if w == 0 or not allowed[-w:].all():
            raise PagedRewriteError(
                f"the mask '{mask}' of {layer.past}'s attention lets a query at position "
                f"{max_tokens - 1} see {w} keys that are not the last {w} (not causal, not a "
                f"sliding window): PagedAttention cannot apply it")
        if w < max_tokens:
            layer.window = w
            nodes[layer.past].attribute.add(name="left_window_size", i=w - 1, type=_ATTR_INT)


def _mask_rows(model, masks: list, total: int, model_dir: Optional[str] = None) -> dict:
    """{mask: which of `total` keys it lets the last query see} for additive (0 / very
    negative) or boolean masks, each computed by its subgraph alone for input_ids [[0]],
    attention_mask ones [1, total], position_ids [[total - 1]] and zero caches of total - 1
    tokens."""
    from onnx_light.onnx_py._onnxpykernels import runtime

    sub = _subgraph_model(model, masks)
    _inline_external(sub, model_dir)
    feeds = {}
    for i in sub.graph.input:
        feeds[i.name] = _mask_feed(i, total)
    state = runtime.PersistentValueState(sub, {})
    try:
        context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
        out = state.run(context, feeds)
        rows = {}
        for name in masks:
            m = np.from_dlpack(out[name]).copy()
            if m.ndim < 1 or m.shape[-1] != total or (m.ndim > 1 and m.shape[-2] != 1):
                raise PagedRewriteError(f"the mask '{name}' is {list(m.shape)} for one query "
                                        f"over {total} keys: not a mask the rewrite can read")
            last = m.reshape(-1, total)[0]
            rows[name] = last if last.dtype == np.bool_ else \
                last > np.finfo(last.dtype).min / 2
    finally:
        state.close()
    return rows


def _mask_feed(value_info, total: int) -> np.ndarray:
    name = value_info.name
    if name == "input_ids":
        return np.zeros((1, 1), np.int64)
    if name == "attention_mask":
        return np.ones((1, total), np.int64)
    if name == "position_ids":
        return np.array([[total - 1]], np.int64)
    elem, dims = value_info.type.tensor_type.elem_type, \
        [d.dim_value if d.HasField("dim_value") else None
         for d in value_info.type.tensor_type.shape.dim]
    dtype = {1: np.float32, 10: np.float16}.get(elem)
    if len(dims) == 4 and dtype is not None and dims[1] is not None and dims[3] is not None:
        return np.zeros((1, dims[1], total - 1, dims[3]), dtype)  # a cache of total - 1 tokens
    raise PagedRewriteError(f"the attention mask reads input '{name}', which the rewrite "
                            f"cannot feed to find its window")


def _inline_external(model, model_dir: Optional[str]) -> None:
    """Reads the external data of `model`'s initializers in (a TorchScript export's mask
    reads the embedding's dtype and shape through its Gather): the subgraph runs from memory,
    where no directory resolves the files."""
    for t in model.graph.initializer:
        entries = {e.key: e.value for e in t.external_data}
        if "location" not in entries:
            continue
        if model_dir is None:
            raise PagedRewriteError(f"the attention mask reads '{t.name}', whose data is in "
                                    f"'{entries['location']}': the rewrite needs the model's "
                                    f"directory")
        path = os.path.join(model_dir, entries["location"])
        with open(path, "rb") as f:
            f.seek(int(entries.get("offset", 0)))
            data = f.read(int(entries["length"])) if "length" in entries else f.read()
        del t.external_data[:]
        t.data_location = 0  # DEFAULT
        t.raw_data = data


def _subgraph_model(model, outputs: list):
    """A model of the nodes `outputs` depend on, with the inputs and initializers they read."""
    from onnx_light import onnx as ol

    graph = model.graph
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    declared = {i.name: i for i in graph.input}
    needed, stack, seen = set(), list(outputs), set()
    while stack:
        name = stack.pop()
        if name in seen or not name:
            continue
        seen.add(name)
        k = producer.get(name)
        if k is None:
            continue
        node = graph.node[k]
        needed.add(k)
        stack.extend(node.input)
        if any(a.g.node or a.graphs for a in node.attribute):
            raise PagedRewriteError(f"the attention mask is computed by node '{node.name}' "
                                    f"with a subgraph; the rewrite cannot find its window")
    sub = ol.ModelProto()
    sub.ir_version = model.ir_version
    sub.opset_import.extend(model.opset_import)
    sub.graph.node.extend(graph.node[k] for k in sorted(needed))
    sub.graph.name = "mask"
    for name in sorted(seen):
        if name in inits:
            sub.graph.initializer.add().CopyFrom(inits[name])
        elif name in declared:
            sub.graph.input.add().CopyFrom(declared[name])
    for name in outputs:
        sub.graph.output.add().name = name
    return sub


def _scalar(model, name, value):
    from onnx_light import onnx as ol

    return ol.TensorProto(name=name, data_type=ol.TensorProto.FLOAT, float_data=[float(value)])


def _int64s(name, values):
    from onnx_light import onnx as ol

    return ol.TensorProto(name=name, data_type=ol.TensorProto.INT64, dims=[len(values)],
                          int64_data=[int(v) for v in values])


_ATTR_FLOAT, _ATTR_INTS = 1, 7  # AttributeProto.FLOAT / INTS
_TO_HEADS = [0, 2, 1, 3]  # [batch, length, heads, head] <-> [batch, heads, length, head]


def _gqa_of(g: _Graph, layer: Layer):
    """The com.microsoft GroupQueryAttention node that appends the layer's caches, or None."""
    n = g.producer.get(layer.present_key)
    if n is None or n.op_type != "GroupQueryAttention" or n.domain != "com.microsoft":
        return None
    if list(n.input[3:5]) != [layer.past_key, layer.past_value] or \
            list(n.output[1:3]) != [layer.present_key, layer.present_value]:
        raise PagedRewriteError(f"GroupQueryAttention node '{n.name}' does not read "
                                f"'{layer.past_key}', '{layer.past_value}' and write "
                                f"'{layer.present_key}', '{layer.present_value}' as its caches")
    return n


def _gqa_head_size(g: _Graph, node, heads: int) -> int:
    """The head size, from the output projection that reads the attention (MatMul over an
    initializer [heads * head, hidden], or MatMulNBits with K = heads * head): the builder's
    inputs leave it symbolic."""
    for c in g.consumers.get(node.output[0], []):
        width = None
        if c.op_type == "MatMul" and c.input[0] == node.output[0] and c.input[1] in g.constants:
            width = list(g.constants[c.input[1]].dims)[0]
        elif c.op_type == "MatMulNBits" and c.input[0] == node.output[0]:
            k = _attr(c, "K")
            width = k.i if k is not None else None
        if width and width % heads == 0:
            return width // heads
    raise PagedRewriteError(f"cannot tell the head size of GroupQueryAttention node "
                            f"'{node.name}': its output is not read by a MatMul over an "
                            f"initializer or a MatMulNBits (the output projection)")


class _Nodes:
    """Appends the nodes of one rewritten layer, named after it."""

    def __init__(self, model, prefix):
        self.graph, self.prefix = model.graph, prefix

    def __call__(self, op, inputs, outputs=1, domain="", **attrs):
        name = f"{self.prefix}/{op}_{len(self.graph.node)}"
        outs = [f"{name}/out{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
        node = self.graph.node.add(op_type=op, domain=domain, name=name, input=inputs,
                                   output=outs)
        for key, value in attrs.items():
            if isinstance(value, list):
                node.attribute.add(name=key, ints=value, type=_ATTR_INTS)
            elif isinstance(value, float):
                node.attribute.add(name=key, f=value, type=_ATTR_FLOAT)
            else:
                node.attribute.add(name=key, i=int(value), type=_ATTR_INT)
        return outs[0] if len(outs) == 1 else outs

    def constant(self, suffix, values):
        name = f"{self.prefix}/{suffix}"
        self.graph.initializer.add().CopyFrom(_int64s(name, values))
        return name


def _rewrite_gqa(model, g: _Graph, layer: Layer, node, max_tokens: int) -> bool:
    """Replaces the GroupQueryAttention node (see the module doc); True when the new graph
    reads position_ids."""
    where = f"GroupQueryAttention node '{node.name}'"
    ints = {a.name: a.i for a in node.attribute if a.type == _ATTR_INT}
    floats = {a.name: a.f for a in node.attribute if a.type == _ATTR_FLOAT}
    heads, kv_heads = ints.get("num_heads", 0), ints.get("kv_num_heads", 0)
    if heads <= 0 or kv_heads <= 0:
        raise PagedRewriteError(f"{where} needs num_heads and kv_num_heads")
    if floats.get("softcap", 0.0) > 0:
        raise PagedRewriteError(f"{where} soft-caps its scores (softcap "
                                f"{floats['softcap']:g}): PagedAttention does not")
    extra = [x for x in list(node.input)[9:] if x]
    if extra:
        raise PagedRewriteError(f"{where} reads {extra} (position_ids, attention_bias or "
                                f"head_sink inputs): the rewrite takes none of them")
    head = _gqa_head_size(g, node, heads)
    layer.head_size = head
    add = _Nodes(model, f"{layer.past}/paged")
    if len(node.input) < 3 or not node.input[1]:  # packed q, k, v
        qkv = add("Reshape", [node.input[0], add.constant("qkv_shape",
                                                          [0, 0, heads + 2 * kv_heads, -1])])
        q, k, v = add("Split", [qkv, add.constant("qkv_split", [heads, kv_heads, kv_heads])], 3,
                      axis=2)
    else:
        q, k, v = (add("Reshape", [x, add.constant(f"{x_name}_shape", [0, 0, n, -1])])
                   for x, x_name, n in zip(node.input[:3], "qkv", (heads, kv_heads, kv_heads)))
    q, k, v = (add("Transpose", [x], perm=_TO_HEADS) for x in (q, k, v))
    rotary = ints.get("do_rotary", 0) != 0
    if rotary:
        cos = g.constants.get(node.input[7]) if len(node.input) > 8 else None
        if cos is None or len(cos.dims) != 2:
            raise PagedRewriteError(f"{where} rotates without a constant cos_cache "
                                    f"[positions, rotary_dim / 2]")
        rotary_dim = 2 * cos.dims[1]
        partial = {"rotary_embedding_dim": rotary_dim} if rotary_dim != head else {}
        q, k = (add("RotaryEmbedding", [x, "position_ids", node.input[7], node.input[8]],
                    domain="com.microsoft", interleaved=ints.get("rotary_interleaved", 0),
                    num_heads=n, **partial)
                for x, n in ((q, heads), (k, kv_heads)))
    scale = floats.get("scale", 0.0) or 1.0 / math.sqrt(head)
    if not math.isclose(scale, 1.0 / math.sqrt(head), rel_tol=1e-6):
        factor = f"{layer.past}/q_scale"
        model.graph.initializer.add().CopyFrom(_scalar(model, factor, scale * math.sqrt(head)))
        q = add("Mul", [q, factor])
    window = ints.get("local_window_size", -1)
    layer.window = max(window, 0)
    y = add("PagedAttention", [q, k, v, layer.past], [f"{layer.past}/paged_attention/y",
                                                       layer.present], domain="ai.rt",
            max_tokens=max_tokens, **({"left_window_size": window - 1} if window > 0 else {}))[0]
    add("Reshape", [add("Transpose", [y], perm=_TO_HEADS), add.constant("y_shape", [0, 0, -1])],
        [node.output[0]])
    return rotary


def _declare_positions(graph):
    """position_ids [batch, length] INT64 as a graph input, unless declared already."""
    if any(i.name == "position_ids" for i in graph.input):
        return
    _tensor_type(graph.input.add(name="position_ids").type.tensor_type, 7,  # INT64
                 ("batch_size", "sequence_length"))


def _tensor_type(tensor, elem_type, dims):
    """Sets a TypeProto.Tensor: element type and shape (str: a dim_param, int: a dim_value)."""
    tensor.elem_type = elem_type
    tensor.shape.CopyFrom(type(tensor.shape)())  # declared, even with no dims (a scalar)
    for dim in dims:
        tensor.shape.dim.add(**({"dim_param": dim} if isinstance(dim, str) else
                                {"dim_value": dim}))


def _swap_io(model, layers, rows):
    graph = model.graph
    declared = {i.name: i for i in graph.input}
    structs = [_cache_struct(model, declared[l.past_key], l.head_size) for l in layers]
    old_in = {n for l in layers for n in (l.past_key, l.past_value)}
    old_out = {n for l in layers for n in (l.present_key, l.present_value)}
    _keep(graph.input, lambda i: i.name not in old_in)
    _keep(graph.output, lambda o: o.name not in old_out)
    del graph.persistent_bindings[:]
    for layer, struct in zip(layers, structs):
        for value in (graph.input.add(name=layer.past), graph.output.add(name=layer.present)):
            cache = value.type.sequence_type.elem_type if rows else value.type
            if struct:
                cache.struct_type.type_ref = struct
            else:
                cache.struct_type.name = "cache"
        graph.persistent_bindings.add(input_name=layer.past, output_name=layer.present)
    if not any(o.domain == "ai.rt" for o in model.opset_import):
        model.opset_import.add(domain="ai.rt", version=1)


def _cache_struct(model, past_key, head_size) -> str:
    """The paged cache's declared layout (a model struct type: blocks of start, length and
    FLOAT key/value [rows, kv_heads, capacity, head]), named after its heads and width, so the
    scheduler's max_kv_bytes knows a token's bytes; "" when the dense cache's heads or width
    are not concrete (then the cache is declared without a layout)."""
    dims = past_key.type.tensor_type.shape.dim
    heads = dims[1].dim_value if len(dims) == 4 and dims[1].HasField("dim_value") else 0
    head = dims[3].dim_value if len(dims) == 4 and dims[3].HasField("dim_value") else head_size
    if not heads or not head:
        return ""
    name = f"ai.rt.PagedKvCache.{heads}x{head}"
    if any(s.name == name for s in model.struct_types):
        return name
    cache = model.struct_types.add(name=name)
    block = cache.field.add(name="blocks").type.sequence_type.elem_type.struct_type
    page = ("rows", heads, "capacity", head)
    for field, elem, dims in (("start", 7, ()), ("length", 7, ()), ("key", 1, page),
                              ("value", 1, page)):
        _tensor_type(block.field.add(name=field).type.tensor_type, elem, dims)
    return name


def _key(node) -> tuple:
    return tuple(node.output)  # SSA: a node's outputs name it


def _remove(graph, nodes):
    gone = {_key(n) for n in nodes}
    _keep(graph.node, lambda n: _key(n) not in gone)


def _keep(field, wanted):
    """Keeps the elements of a repeated message field for which wanted(element) holds."""
    kept = []
    for element in field:
        if wanted(element):
            copy = type(element)()
            copy.CopyFrom(element)
            kept.append(copy)
    if len(kept) != len(field):
        del field[:]
        field.extend(kept)


def _used_names(graph) -> set:
    used = {o.name for o in graph.output}
    for n in graph.node:
        used.update(x for x in n.input if x)
        for a in n.attribute:
            for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                used |= _used_names(sub)
    return used


def _remove_dead(graph):
    while True:
        used = _used_names(graph)
        dead = [n for n in graph.node if not any(o in used for o in n.output if o)]
        if not dead:
            break
        _remove(graph, dead)
    used = _used_names(graph)
    _keep(graph.input, lambda i: i.name in used)
    _keep(graph.initializer, lambda t: t.name in used)


def _topological_sort(graph):
    """The new nodes were appended: order every node after its producers."""
    produced = {o: i for i, n in enumerate(graph.node) for o in n.output}
    order, state = [], {}

    def visit(i):
        if state.get(i) == 2:
            return
        if state.get(i) == 1:
            raise PagedRewriteError("the rewritten graph has a cycle")
        state[i] = 1
        for x in graph.node[i].input:
            if x in produced:
                visit(produced[x])
        state[i] = 2
        order.append(i)

    for i in range(len(graph.node)):
        visit(i)
    nodes = []
    for i in order:
        copy = type(graph.node[i])()
        copy.CopyFrom(graph.node[i])
        nodes.append(copy)
    del graph.node[:]
    graph.node.extend(nodes)


def removed_inputs(before, after) -> list:
    return sorted(set(before) - {i.name for i in after.input})


def _cache_dims(original, name):
    for i in original.graph.input:
        if i.name == name:
            t = i.type.tensor_type
            return t.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                 for d in t.shape.dim]
    raise PagedRewriteError(f"input '{name}' is not declared")


class _DenseRun:
    """The original graph stepped with its caches fed back by hand: on onnxruntime, or on
    onnx-light (the reference for the rewrite alone, where the two engines' quantized
    products round differently)."""

    def __init__(self, step, layers, caches):
        self.step_fn, self.layers, self.caches = step, layers, caches

    def step(self, feeds):
        out = self.step_fn({**feeds, **self.caches})
        self.caches = {name: out[present] for layer in self.layers
                       for name, present in ((layer.past_key, layer.present_key),
                                             (layer.past_value, layer.present_value))}
        return out["logits"]


def _relative(got, expected) -> float:
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    return float(np.abs(got - expected).max()) / max(1.0, float(np.abs(expected).max()))


def verify(original_path, prepared_path, layers, rows: bool, steps: int = 3,
           tolerance: float = 1e-4, flags=()) -> str:
    """The rewrite on onnx-light against the original on onnxruntime and on onnx-light: a
    prompt of 6 tokens (two rows when `rows`) and `steps` greedy decode steps, the originals'
    presents fed back and the paged caches kept by a PersistentValueState. Raises
    PagedRewriteError when the logits differ from either by more than
    tolerance * max(1, |logits|); returns a one-line summary. MatMulNBits nodes are checked
    at accuracy_level 0 (float activations): level 4 quantizes activations to int8, and a
    rounding flip there turns the rewrite's (or another engine's) summation order into logit
    differences of 1e-2 over a 30-layer int4 build. flags: the BOOL inputs of a merged
    decoder's branch choice (merged_decoder), fed False to the original on the prompt and True
    after."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "logits check against onnxruntime skipped (onnxruntime not installed)"
    from onnx_light import onnx as ol

    original, prepared = ol.load_model(original_path), ol.load_model(prepared_path)
    # Past the narrowest sliding window, where it is short enough to step there.
    windows = [l.window for l in layers if 0 < l.window <= 64]
    if windows:
        steps = max(steps, min(windows) - 6 + 2)
    levels = _float_activations(original)
    _float_activations(prepared)
    ort_path = str(original_path)
    if levels:  # beside the original: its external data is referenced relative to it
        folder, name = os.path.split(os.path.abspath(original_path))
        ort_path = os.path.join(folder, f".{name}.check-{os.getpid()}.onnx")
        ol.save_model(original, ort_path)
    try:
        session = ort.InferenceSession(ort_path, providers=["CPUExecutionProvider"])
        summary = _compare(session, original, prepared, layers, rows, steps, tolerance,
                           tuple(flags))
    finally:
        if ort_path != str(original_path) and os.path.exists(ort_path):
            os.remove(ort_path)
    return summary + (f"; {levels} MatMulNBits checked at accuracy_level 0" if levels else "")


def _float_activations(model) -> int:
    """Sets accuracy_level 0 on the model's MatMulNBits nodes; returns how many changed."""
    changed = 0
    for node in model.graph.node:
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
            for a in node.attribute:
                if a.name == "accuracy_level" and a.i != 0:
                    a.i = 0
                    changed += 1
    return changed


def _compare(session, original, prepared, layers, rows, steps, tolerance, flags) -> str:
    from onnx_light.onnx_py._onnxpykernels import runtime

    batch, length = (2, 6) if rows else (1, 6)
    caches = _empty_dense_caches(original, layers, batch)
    original_inputs = {i.name for i in original.graph.input}
    extra = sorted(original_inputs - {"input_ids", "attention_mask", "position_ids"} -
                   set(caches) - set(flags))
    if extra:
        raise PagedRewriteError(f"cannot check the rewrite: the model has inputs {extra} "
                                f"beyond input_ids, attention_mask, position_ids and the caches")
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    out_names = [o.name for o in session.get_outputs()]
    dense_state = runtime.PersistentValueState(original, {})

    def ours_dense(feeds):
        out = dense_state.run(context, feeds)
        return {k: np.from_dlpack(v).copy() for k, v in out.items()}

    theirs = _DenseRun(lambda f: dict(zip(out_names, session.run(out_names, f))), layers, caches)
    dense = _DenseRun(ours_dense, layers, caches)
    empty = [{"blocks": []} for _ in range(batch)] if rows else {"blocks": []}
    state = runtime.PersistentValueState(prepared, {l.past: empty for l in layers})
    ours_inputs = {i.name for i in prepared.graph.input}
    ids = np.random.default_rng(0).integers(0, 100, (batch, length), dtype=np.int64)
    start, worst, worst_ort = 0, 0.0, 0.0
    for step in range(steps + 1):
        total = start + ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((batch, total), np.int64),
                 "position_ids": np.arange(start, total, dtype=np.int64)[None].repeat(batch, 0),
                 **{flag: np.array([step > 0]) for flag in flags}}
        expected = theirs.step({k: v for k, v in feeds.items() if k in original_inputs})
        reference = dense.step({k: v for k, v in feeds.items() if k in original_inputs})
        out = state.run(context, {k: v for k, v in feeds.items() if k in ours_inputs})
        got = np.from_dlpack(out["logits"]).copy()
        del out
        if got.shape != expected.shape:
            raise PagedRewriteError(f"step {step}: logits {list(got.shape)} against "
                                    f"onnxruntime's {list(expected.shape)}")
        # FLOAT16 logits: a few of their units in the last place, whatever `tolerance` says.
        tolerance = max(tolerance, 4 * float(np.finfo(expected.dtype).eps))
        worst = max(worst, _relative(got, reference))
        worst_ort = max(worst_ort, _relative(got, expected))
        if max(worst, worst_ort) > tolerance:
            raise PagedRewriteError(
                f"the rewritten attention changes the logits at step {step} (relative "
                f"difference {worst:.2e} from the original on onnx-light, {worst_ort:.2e} from "
                f"it on onnxruntime; the limit is {tolerance:g}): the export's attention mask is "
                f"not the causal mask PagedAttention applies, or its attention is not the form "
                f"the rewrite knows; nothing written")
        start = total
        ids = expected[:, -1].argmax(-1)[:, None].astype(np.int64)
    state.close()
    dense_state.close()
    return (f"logits equal onnx-light's on the original within {worst:.1e} and onnxruntime's "
            f"within {worst_ort:.1e} (relative) over a {length}-token prompt and {steps} decode "
            f"steps, batch {batch}")


def _empty_dense_caches(original, layers, batch) -> dict:
    caches = {}
    for layer in layers:
        for name in (layer.past_key, layer.past_value):
            elem, dims = _cache_dims(original, name)
            dims[3] = dims[3] or layer.head_size
            dtype = {1: np.float32, 10: np.float16}.get(elem)
            if dtype is None or dims[1] is None or dims[3] is None:
                raise PagedRewriteError(f"input '{name}' must be FLOAT or FLOAT16 with declared "
                                        f"heads and head size for the logits check")
            caches[name] = np.zeros((batch, dims[1], 0, dims[3]), dtype)
    return caches
