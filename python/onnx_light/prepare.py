"""Turns a standard decoder export into an onnx-light model with ``persistent_bindings``.

``prepare_decoder(in_path, out_path, bind="auto")`` (and ``python -m onnx_light prepare``):

1. finds the past/present pairs by the naming conventions of the exporters it knows
   (`find_pairs`): ``past_key_values.<rest>`` -> ``present.<rest>`` (torch.onnx dynamo,
   Optimum, the onnxruntime-genai builder), ``past_key_values.<rest>`` ->
   ``present_key_values.<rest>`` and ``past_<rest>`` / ``past.<rest>`` -> ``present_<rest>`` /
   ``present.<rest>`` (onnxruntime's transformers tools). Explicit pairs are taken as given:
   no name is guessed then;
2. makes every bound input single-use (`make_single_use`): a one-input ``Concat`` or an
   ``Identity`` of it (a copy of the cache every step) is removed, its readers reading the
   input; a ``Shape`` (with its start/end)
   or ``Size`` of a bound input is answered from other graph inputs: a static dimension from
   the input's declared type, a symbolic one from a non-bound input declaring the same
   symbol (or ``input_ids`` dim 0 for axis 0), the cache length (axis -2) as
   ``attention_mask`` dim 1 - ``input_ids`` dim 1. A ``Shape`` read only by ``Gather``s of
   constant indices needs only the dimensions they pick: each Gather is answered and the
   Shape dropped. Several node inputs reading a bound input read one Identity of it
   instead. A capture in a subgraph or a graph output beside another use is refused, naming
   the input and the node;
3. answers the ``Shape`` reads of dimensions the declared types fix, reads the symbolic ones
   (batch, sequence) from the non-bound graph input declaring the symbol, once for every
   layer, and drops no-op ``Cast``s (`static_shapes.fold_static_shapes`, with the ``onnx``
   package's shape inference; the TorchScript exporter's files are full of all three);
4. adds the bindings, writes OUT next to IN's external data (the weights are neither read
   nor copied: OUT refers to the same data file, so it must be in IN's directory), then
   checks OUT with the onnx checker (when the ``onnx`` package is installed) and by building
   an onnx-light ``PersistentValueState`` from it.

The runtime itself never guesses bindings; this step is where a user confirms them.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, Iterable, Optional, Sequence, Union

from onnx_light import merged_decoder
from onnx_light.model_folder import model_file
from onnx_light.static_shapes import fold_static_shapes

__all__ = ["PrepareError", "PrepareReport", "Rewrite", "Candidate", "find_pairs",
           "make_single_use", "prepare_decoder", "main"]


class PrepareError(ValueError):
    """What prepare cannot do; the message names the input and node concerned."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A past/present pair found by a naming convention."""
    past: str
    present: str
    convention: str


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """One read of a bound input replaced by values computed from other inputs."""
    op_type: str     # "Shape", "Size" or "Identity" (shared by several readers)
    node_name: str
    input_name: str  # the bound input it read
    answer: str      # what now produces its output


@dataclasses.dataclass
class PrepareReport:
    input_path: str
    output_path: str
    pairs: list                       # [(past, present)]
    conventions: dict                 # past -> convention label ("explicit" for --bind pairs)
    rewrites: list                    # [Rewrite]
    external_data: list               # data files OUT refers to (in place, not copied)
    checks: list                      # checks run on OUT
    # (Shape reads folded, no-op Casts removed, Shape reads shared) by
    # static_shapes.fold_static_shapes; None
    # when it did not run (no onnx package, inference failed, or a paged rewrite).
    static_shapes: Optional[tuple] = None
    merged: Optional[str] = None      # what merged_decoder.inline_with_past_branch did

    def format(self) -> str:
        labels = {self.conventions.get(past, "named explicitly") for past, _ in self.pairs}
        shared = labels.pop() if len(labels) == 1 else None
        lines = [f"prepared {self.input_path} -> {self.output_path}"]
        if self.merged:
            lines.append(self.merged)
        lines += [
                 f"bound {len(self.pairs)} past/present pairs"
                 + (f" ({shared}):" if shared else ":")]
        for past, present in self.pairs:
            suffix = "" if shared else f"  ({self.conventions.get(past, 'named explicitly')})"
            lines.append(f"  {past} <- {present}{suffix}")
        lines.append(f"rewrote {len(self.rewrites)} nodes reading bound inputs:")
        for r in self.rewrites:
            lines.append(f"  {r.op_type} '{r.node_name}' of {r.input_name} -> {r.answer}")
        if self.external_data:
            lines.append("external data referenced in place (not copied): "
                         + ", ".join(self.external_data))
        if self.static_shapes is not None:
            folded, casts, shared = self.static_shapes
            lines.append(f"answered {folded} Shape reads of dimensions the types fix, read "
                         f"{shared} symbolic ones from the graph inputs declaring them and "
                         f"removed {casts} Casts to the type their input has (onnx shape "
                         f"inference)")
        lines.append("checks: " + "; ".join(self.checks))
        return "\n".join(lines)

    __str__ = format


# --- naming conventions -------------------------------------------------------------------

_GENAI = "torch.onnx dynamo / Optimum / onnxruntime-genai builder"
# (input prefix, output prefix, label), tried in order for each graph input.
CONVENTIONS = [
    ("past_key_values.", "present.", _GENAI + ": past_key_values.* -> present.*"),
    ("past_key_values.", "present_key_values.", "past_key_values.* -> present_key_values.*"),
    ("past_key_values_", "present_", "past_key_values_* -> present_*"),
    ("past.", "present.", "past.* -> present.*"),
    ("past_", "present_", "onnxruntime transformers tools: past_* -> present_*"),
]


def _graph_input_names(graph) -> list:
    return [i.name for i in graph.input]


def find_pairs(model) -> list:
    """Past/present pairs of `model` (onnx or onnx_light ModelProto) by `CONVENTIONS`.
    Raises PrepareError for an input that looks like a cache (named past...) but has no
    matching output, or two inputs matching one output: such a model needs explicit pairs."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    initializers = {t.name for t in graph.initializer}
    found, used = [], {}
    for name in _graph_input_names(graph):
        if name in initializers:
            continue
        match = None
        for past_prefix, present_prefix, label in CONVENTIONS:
            if name.startswith(past_prefix) and name != past_prefix:
                present = present_prefix + name[len(past_prefix):]
                if present in outputs:
                    match = Candidate(name, present, label)
                    break
        if match is None:
            if name.lower().startswith("past"):
                raise PrepareError(
                    f"input '{name}' looks like a cache but no graph output matches it by a "
                    f"known naming convention; name every pair explicitly "
                    f"(--bind {name}=OUTPUT ...)")
            continue
        if match.present in used:
            raise PrepareError(
                f"inputs '{used[match.present]}' and '{name}' both match output "
                f"'{match.present}'; name the pairs explicitly with --bind")
        used[match.present] = name
        found.append(match)
    return found


# --- single use ---------------------------------------------------------------------------

class _Protos:
    """The message classes of the model's package (onnx or onnx_light.onnx)."""

    def __init__(self, model):
        if type(model).__module__.startswith("onnx_light") or "onnx_light" in repr(type(model)):
            from onnx_light import onnx as ns
        else:
            import onnx as ns
        self.ns = ns

    def node(self, op_type, inputs, outputs, name, **attrs):
        ns = self.ns
        node = ns.NodeProto(op_type=op_type, input=list(inputs), output=list(outputs),
                            name=name)
        for key, value in attrs.items():
            if isinstance(value, int):
                node.attribute.add(name=key, type=ns.AttributeProto.INT, i=value)
            else:  # an int64 tensor: (dims, values)
                dims, values = value
                a = node.attribute.add(name=key, type=ns.AttributeProto.TENSOR)
                a.t.CopyFrom(ns.TensorProto(name=name, data_type=ns.TensorProto.INT64,
                                            dims=list(dims), int64_data=list(values)))
        return node


def _opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def _names_in_graph(graph, out: set) -> None:
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        out.add(v.name)
    for t in graph.initializer:
        out.add(t.name)
    for n in graph.node:
        out.add(n.name)
        out.update(n.input)
        out.update(n.output)
        for a in n.attribute:
            for g in _subgraphs(a):
                _names_in_graph(g, out)


def _undefined_inputs(graph, outer: frozenset = frozenset()) -> set:
    """(node, input) pairs of `graph` (and its subgraphs, which see the enclosing scopes)
    whose input no graph input, initializer or node output of a visible scope defines."""
    scope = set(outer)
    scope.update(i.name for i in graph.input)
    scope.update(t.name for t in graph.initializer)
    for n in graph.node:
        scope.update(o for o in n.output if o)
    undefined = set()
    for n in graph.node:
        label = f"{n.op_type} node '{n.name}'"
        undefined.update((label, x) for x in n.input if x and x not in scope)
        for a in n.attribute:
            for g in _subgraphs(a):
                undefined |= _undefined_inputs(g, frozenset(scope))
    undefined.update(("graph output", o.name) for o in graph.output if o.name not in scope)
    return undefined


def _check_defined(graph, before: set) -> None:
    """Refuses a rewrite that left a node reading a value nothing defines (a value the input
    model already left undefined is not ours to judge: the runtime reports it)."""
    new = sorted(_undefined_inputs(graph) - before)
    if new:
        where, name = new[0]
        raise PrepareError(f"internal error: the rewrite left {where} reading '{name}', which "
                           f"nothing defines ({len(new)} such inputs); nothing written")


def _subgraphs(attribute) -> list:
    graphs = list(attribute.graphs)
    if attribute.HasField("g"):
        graphs.append(attribute.g)
    return graphs


def _references(graph, name: str) -> int:
    """References to `name` inside a (nested) graph: a capture counts as a use."""
    count = 0
    for n in graph.node:
        count += sum(1 for x in n.input if x == name)
        for a in n.attribute:
            for g in _subgraphs(a):
                count += _references(g, name)
    count += sum(1 for o in graph.output if o.name == name)
    return count


def _dims(value_info):
    t = value_info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return list(t.tensor_type.shape.dim)


def _int_values(tensor) -> Optional[list]:
    """The values of an INT64/INT32 TensorProto stored in the file, or None."""
    import numpy as np

    dtype = {7: np.int64, 6: np.int32}.get(tensor.data_type)
    if dtype is None or len(tensor.external_data):
        return None
    if tensor.raw_data:
        values = np.frombuffer(tensor.raw_data, dtype=dtype)
    else:
        values = np.array(tensor.int64_data if dtype is np.int64 else tensor.int32_data)
    count = int(np.prod(list(tensor.dims))) if len(tensor.dims) else 1
    return [int(v) for v in values] if len(values) == count else None


def _constant_indices(graph, name: str) -> Optional[tuple]:
    """(values, is_scalar) of `name` when a Constant node or an initializer of `graph` holds
    it as an int tensor of rank <= 1; else None."""
    tensor = next((t for t in graph.initializer if t.name == name), None)
    for n in graph.node:
        if tensor is None and name in n.output and n.op_type == "Constant" \
                and n.domain in ("", "ai.onnx"):
            tensor = next((a.t for a in n.attribute if a.name == "value"), None)
    if tensor is None or len(tensor.dims) > 1:
        return None
    values = _int_values(tensor)
    return None if values is None else (values, len(tensor.dims) == 0)


def _gather_reads(graph, nodes, shape_node, length: int) -> Optional[list]:
    """[(gather node, [positions], is_scalar)] when the only readers of `shape_node`'s output
    among `nodes` (the graph's, as the caller holds them) are Gathers along axis 0 with
    constant in-range indices, so only those positions of the shape matter; None when
    anything else reads it."""
    out = shape_node.output[0]
    if any(o.name == out for o in graph.output):
        return None
    reads = []
    for n in nodes:
        captured = any(_references(g, out) for a in n.attribute for g in _subgraphs(a))
        if out not in n.input and not captured:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        if captured or n.op_type != "Gather" or n.domain not in ("", "ai.onnx") \
                or list(n.input).count(out) != 1 or n.input[0] != out or axis not in (0, -1):
            return None
        found = _constant_indices(graph, n.input[1])
        if not found or not found[0] or any(not -length <= i < length for i in found[0]):
            return None
        reads.append((n, [i + length if i < 0 else i for i in found[0]], found[1]))
    return reads


def _one_reader(protos, name: str, uses: list, out: str, new_nodes: list) -> Rewrite:
    """Several node inputs read bound input `name`: one Identity reads it and they read its
    output instead, so the input has one use and every reader sees the same value. (An
    attention that no longer consumes the bound cache itself builds its present afresh
    rather than appending in place: slower, never different.)"""
    new_nodes.append(protos.node("Identity", [name], [out], out))
    for node, position in uses:
        node.input[position] = out
    readers = ", ".join(f"{n.op_type} '{n.name}'" for n, _ in uses)
    return Rewrite("Identity", out, name, f"one Identity read by its {len(uses)} readers "
                                          f"({readers})")


def input_symbols(graph, bound, primary=("input_ids", "attention_mask")) -> dict:
    """{dim_param: (input, axis)}: where each symbol the non-bound graph inputs declare is
    first declared, the `primary` inputs looked at first."""
    declared = {i.name: i for i in graph.input}
    order = [n for n in primary if n in declared] + \
        [i.name for i in graph.input if i.name not in primary]
    symbols: dict = {}
    for name in order:
        if name in bound:
            continue
        for axis, d in enumerate(_dims(declared[name]) or []):
            if d.dim_param and d.dim_param not in symbols:
                symbols[d.dim_param] = (name, axis)
    return symbols


def _bypass_pass_throughs(graph, bound) -> list:
    """Removes the one-input Concats and Identities of a bound input (the TorchScript exporter
    wraps the first layer's past in a Concat of one input): each copies the whole cache every
    step, and the cache append reading the copy cannot extend the bound buffer in place. Their
    readers read the input itself. Not when the output is a graph output or read inside a
    subgraph. Returns the `Rewrite`s."""
    outputs = {o.name for o in graph.output}
    captured: set = set()
    for node in graph.node:
        for a in node.attribute:
            for g in _subgraphs(a):
                _names_in_graph(g, captured)
    rewrites, sources = [], set(bound)
    changed = True
    while changed:
        changed = False
        for index, node in enumerate(graph.node):
            if node.op_type not in ("Concat", "Identity") or node.domain not in ("", "ai.onnx") \
                    or len(node.input) != 1 or node.input[0] not in sources \
                    or len(node.output) != 1 or node.output[0] in outputs | captured:
                continue
            source, copy = node.input[0], node.output[0]
            for reader in graph.node:
                for i, x in enumerate(reader.input):
                    if x == copy:
                        reader.input[i] = source
            rewrites.append(Rewrite(node.op_type, node.name, source,
                                    f"removed (a copy of the input; its readers read "
                                    f"'{source}')"))
            del graph.node[index]
            changed = True
            break
    return rewrites


def make_single_use(model, inputs: Iterable[str], known_dims: Optional[dict] = None,
                    ids_name: str = "input_ids", mask_name: str = "attention_mask") -> list:
    """Rewrites every ``Shape``/``Size`` of each input in `inputs` into values computed from
    other graph inputs, and several node inputs reading it into readers of one ``Identity``
    of it, so each keeps exactly one use; returns the `Rewrite`s. Works in place
    on an ``onnx`` or ``onnx_light.onnx`` ModelProto; the outputs are unchanged for the feeds
    the conventions describe (batch shared with `ids_name`, cache length =
    `mask_name` dim 1 - `ids_name` dim 1). `known_dims` {axis: size} answers dimensions
    that are symbolic in the declaration. Raises PrepareError, naming the input and the
    node, for a capture in a subgraph or a graph output beside another use, or a dimension it
    cannot derive."""
    known_dims = dict(known_dims or {})
    protos = _Protos(model)
    graph = model.graph
    bound = list(inputs)
    bypassed = _bypass_pass_throughs(graph, bound)
    declared = {i.name: i for i in graph.input}
    bound_set = set(bound)
    nodes = list(graph.node)
    # Reads to rewrite, per bound input, and every other use.
    reads = {name: [] for name in bound}
    others = {name: [] for name in bound}
    consumers = {name: [] for name in bound}  # (node, input position) of the value uses
    unrewritable = {name: [] for name in bound}  # captures and graph outputs
    for node in nodes:
        for position, x in enumerate(node.input):
            if x not in bound_set:
                continue
            if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx") \
                    and position == 0:
                reads[x].append(node)
            else:
                others[x].append(f"{node.op_type} node '{node.name}' (input {position})")
                consumers[x].append((node, position))
        for a in node.attribute:
            for g in _subgraphs(a):
                for name in bound:
                    for _ in range(_references(g, name)):  # each reference is a use
                        use = (f"{node.op_type} node '{node.name}' (captured in its subgraph "
                               f"'{a.name}')")
                        others[name].append(use)
                        unrewritable[name].append(use)
    for o in graph.output:
        if o.name in bound_set:
            others[o.name].append(f"graph output '{o.name}'")
            unrewritable[o.name].append(f"graph output '{o.name}'")
    for name in bound:
        if name not in declared:
            raise PrepareError(f"'{name}' is not a graph input")
        if len(others[name]) > 1 and unrewritable[name]:
            # A capture or a graph output cannot read a copy instead (a subgraph may shadow
            # the name; an output keeps its name), so it cannot share the one use.
            first = others[name][0]
            second = next((u for u in unrewritable[name] if u != first), others[name][1])
            raise PrepareError(
                f"input '{name}' has a second use that prepare cannot rewrite: {second} (its "
                f"first use is {first}); Shape/Size reads and node inputs are rewritten, "
                f"captures in subgraphs and graph outputs are not")
        if not others[name]:
            where = ", ".join(f"{n.op_type} '{n.name}'" for n in reads[name]) or "none"
            raise PrepareError(
                f"input '{name}' has no use besides Shape/Size reads ({where}): a bound "
                f"input needs exactly one value use")
    targets = [(name, node) for name in bound for node in reads[name]]
    shared = [name for name in bound if len(consumers[name]) > 1]
    if not targets and not shared:
        return bypassed

    taken: set = set()
    _names_in_graph(graph, taken)
    prefix = "prepare_dim"
    while any(t.startswith(prefix) for t in taken):
        prefix += "_"
    prefix += "/"
    new_nodes: list = []
    cache: dict = {}  # source key -> tensor name (1-D INT64 [1])
    counter = [0]
    opset = _opset(model)

    def fresh(hint: str) -> str:
        counter[0] += 1
        return f"{prefix}{hint}_{counter[0]}"

    def const(values, dims=None) -> str:
        key = ("const", tuple(values), tuple(dims) if dims is not None else None)
        if key not in cache:
            out = fresh("const")
            new_nodes.append(protos.node("Constant", [], [out], out,
                                         value=(dims if dims is not None else [len(values)],
                                                values)))
            cache[key] = out
        return cache[key]

    def input_dim(source: str, axis: int) -> str:
        key = ("dim", source, axis)
        if key not in cache:
            out = fresh(f"{source}_dim{axis}")
            # Gather(Shape(source)): the form static_shapes reads inputs' dimensions in, so
            # the two share one Shape of each input (fold_static_shapes merges them).
            shape = cache.setdefault(("shape", source), fresh(f"{source}_shape"))
            if not any(shape in n.output for n in new_nodes):
                new_nodes.append(protos.node("Shape", [source], [shape], shape))
            new_nodes.append(protos.node("Gather", [shape, const([axis])], [out], out, axis=0))
            cache[key] = out
        return cache[key]

    def declared_dims(name, node):
        dims = _dims(declared[name])
        if dims is None:
            raise PrepareError(
                f"input '{name}' has no declared tensor shape: cannot answer {node.op_type} "
                f"node '{node.name}' without reading it")
        return dims

    # Symbols of the non-bound inputs, for symbolic cache dimensions.
    primary = (ids_name, mask_name)
    symbols = input_symbols(graph, bound_set, primary)

    def dim(name: str, axis: int, rank: int, node) -> tuple:
        """(tensor name, description) of one dimension of bound input `name`."""
        d = declared_dims(name, node)[axis]
        if d.HasField("dim_value"):
            return const([d.dim_value]), str(d.dim_value)
        if axis in known_dims:
            return const([known_dims[axis]]), str(known_dims[axis])
        if d.dim_param and d.dim_param in symbols and symbols[d.dim_param][0] in primary:
            source, source_axis = symbols[d.dim_param]
            return input_dim(source, source_axis), f"{source} dim {source_axis}"
        if axis == 0 and ids_name in declared:
            return input_dim(ids_name, 0), f"{ids_name} dim 0"
        if axis == rank - 2 and rank >= 2 and ids_name in declared and mask_name in declared:
            key = ("past",)
            if key not in cache:
                out = fresh("past_length")
                new_nodes.append(protos.node("Sub", [input_dim(mask_name, 1),
                                                     input_dim(ids_name, 1)], [out], out))
                cache[key] = out
            return cache[key], f"{mask_name} dim 1 - {ids_name} dim 1"
        if d.dim_param and d.dim_param in symbols:  # another non-bound input's symbol
            source, source_axis = symbols[d.dim_param]
            return input_dim(source, source_axis), f"{source} dim {source_axis}"
        shown = d.dim_param or "unnamed"
        raise PrepareError(
            f"dimension {axis} ('{shown}') of input '{name}' is neither static nor derivable "
            f"from other inputs; it is read by {node.op_type} node '{node.name}'")

    def gather_answer(parts, scalar, gather):
        """The node that gives `gather`'s output from the dimensions it reads."""
        gather_name = gather.name or gather.output[0]
        if scalar:
            return protos.node("Reshape", [parts[0][0], const([], dims=[0])],
                               list(gather.output), gather_name)
        return protos.node("Concat", [p for p, _ in parts], list(gather.output), gather_name,
                           axis=0)

    rewrites = []
    replacement = {}
    for name, node in targets:
        rank = len(declared_dims(name, node))
        node_name = node.name or node.output[0]
        if node.op_type == "Shape":
            attrs = {a.name: a.i for a in node.attribute}
            start, end = attrs.get("start", 0), attrs.get("end", rank)
            start = min(max(start + rank if start < 0 else start, 0), rank)
            end = min(max(end + rank if end < 0 else end, 0), rank)
            try:
                parts = [dim(name, k, rank, node) for k in range(start, end)]
            except PrepareError:
                # A dimension nobody reads need not be derived: answer each Gather of the
                # shape with the positions it reads, and drop the Shape.
                gathers = _gather_reads(graph, nodes, node, end - start)
                if gathers is None:
                    raise
                answers = []
                for gather, positions, scalar in gathers:
                    picked = [dim(name, start + k, rank, node) for k in positions]
                    replacement[id(gather)] = [gather_answer(picked, scalar, gather)]
                    answers.append(f"Gather '{gather.name or gather.output[0]}' <- "
                                   + ", ".join(d for _, d in picked))
                replacement[id(node)] = []
                rewrites.append(Rewrite("Shape", node_name, name, "; ".join(answers)))
                continue
            if not parts:
                new = [protos.node("Constant", [], list(node.output), node_name,
                                   value=([0], []))]
                answer = "an empty shape"
            elif len(parts) == 1:
                new = [protos.node("Identity", [parts[0][0]], list(node.output), node_name)]
                answer = parts[0][1]
            else:
                new = [protos.node("Concat", [p for p, _ in parts], list(node.output),
                                   node_name, axis=0)]
                answer = "[" + ", ".join(d for _, d in parts) + "]"
        else:  # Size: the product of every dimension, as a scalar
            parts = [dim(name, k, rank, node) for k in range(rank)]
            product, new = (None if parts else const([1])), []
            for k, (p, _) in enumerate(parts):
                if k == 0:
                    product = p
                    continue
                out = fresh("size")
                new.append(protos.node("Mul", [product, p], [out], out))
                product = out
            new.append(protos.node("Reshape", [product, const([], dims=[0])],
                                   list(node.output), node_name))
            answer = "product of [" + ", ".join(d for _, d in parts) + "]"
        replacement[id(node)] = new
        rewrites.append(Rewrite(node.op_type, node_name, name, answer))

    for name in shared:
        rewrites.append(_one_reader(protos, name, consumers[name], fresh(f"{name}_readers"),
                                    new_nodes))
    rebuilt = list(new_nodes)
    for node in nodes:
        rebuilt.extend(replacement.get(id(node), [node]))
    del graph.node[:]
    graph.node.extend(rebuilt)
    return bypassed + rewrites


# --- prepare ------------------------------------------------------------------------------

BindSpec = Union[str, Sequence[tuple], None]


def _external_locations(graph, out: set) -> None:
    tensors = list(graph.initializer) + list(getattr(graph, "sparse_initializer", []))
    for t in tensors:
        if hasattr(t, "values"):  # sparse
            continue
        for e in t.external_data:
            if e.key == "location":
                out.add(e.value)
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                for e in a.t.external_data:
                    if e.key == "location":
                        out.add(e.value)
            for g in _subgraphs(a):
                _external_locations(g, out)


def _numpy_dtype(elem_type: int):
    import numpy as np
    return {1: np.float32, 10: np.float16, 11: np.float64, 2: np.uint8, 3: np.int8,
            5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_}.get(elem_type)


def _check_pairs(graph, pairs) -> None:
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    seen_in, seen_out = set(), set()
    for past, present in pairs:
        if past not in inputs:
            raise PrepareError(f"unknown name '{past}' in --bind: the graph has no input "
                               f"'{past}'")
        if present not in outputs:
            raise PrepareError(f"unknown name '{present}' in --bind: the graph has no output "
                               f"'{present}'")
        if past in seen_in or present in seen_out:
            raise PrepareError(f"'{past}={present}' repeats a bound input or output")
        seen_in.add(past)
        seen_out.add(present)
        a, b = inputs[past].type, outputs[present].type
        if a.HasField("tensor_type") and b.HasField("tensor_type"):
            ta, tb = a.tensor_type, b.tensor_type
            if ta.elem_type and tb.elem_type and ta.elem_type != tb.elem_type:
                raise PrepareError(f"input '{past}' and output '{present}' have different "
                                   f"element types ({ta.elem_type} and {tb.elem_type})")
            if ta.HasField("shape") and tb.HasField("shape") and \
                    len(ta.shape.dim) != len(tb.shape.dim):
                raise PrepareError(f"input '{past}' (rank {len(ta.shape.dim)}) and output "
                                   f"'{present}' (rank {len(tb.shape.dim)}) differ in rank")


def _parse_bind(bind) -> Optional[list]:
    """None (auto or ask) or explicit [(past, present)]."""
    if bind is None or bind == "auto" or bind == ["auto"]:
        return None
    if isinstance(bind, str):
        bind = [bind]
    pairs = []
    for item in bind:
        if isinstance(item, str):
            if item == "auto":
                raise PrepareError("--bind auto cannot be combined with explicit pairs")
            if item.count("=") != 1 or item.startswith("=") or item.endswith("="):
                raise PrepareError(f"--bind '{item}': expected past=present")
            item = tuple(item.split("="))
        past, present = item
        pairs.append((str(past), str(present)))
    if not pairs:
        raise PrepareError("--bind needs 'auto' or at least one past=present pair")
    return pairs


def prepare_decoder(in_path, out_path, bind: BindSpec = None,
                    confirm: Optional[Callable[[list], bool]] = None,
                    check_onnx: bool = True, paged: Optional[str] = None,
                    progress: Optional[Callable[[str], None]] = None) -> PrepareReport:
    """Writes OUT: IN with persistent_bindings and single-use bound inputs.

    bind: "auto" accepts the pairs `find_pairs` lists; a list of (past, present) tuples or
    "past=present" strings names them (nothing is guessed). With bind=None, `confirm(pairs)`
    is asked (return True to accept the list of `Candidate`); without it, PrepareError.
    paged: None keeps the dense caches; "cache" (one paged cache per layer) or "rows" (a
    sequence of row caches per layer, what the batched RequestScheduler steps) rewrites each
    layer's attention onto ai.rt::PagedAttention (`paged_rewrite`), checked against the
    original on onnxruntime by logits.
    progress(stage) is called as each stage starts (the command line shows it on a terminal).
    Returns the `PrepareReport`; raises PrepareError for anything it cannot do."""
    from onnx_light import onnx as ol

    stage = progress or (lambda _: None)

    in_path, out_path = os.fspath(in_path), os.fspath(out_path)
    try:
        in_path = model_file(in_path)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    if not os.path.isfile(in_path):
        raise PrepareError(f"cannot read '{in_path}': no such file")
    explicit = _parse_bind(bind)
    stage("reading the graph")
    try:
        model = ol.load_model(in_path)  # the graph only: external data stays in its files
    except Exception as e:  # noqa: BLE001 - reported as one line
        raise PrepareError(f"cannot load '{in_path}': {e}") from None
    graph = model.graph
    if len(graph.persistent_bindings):
        raise PrepareError(f"'{in_path}' already has persistent_bindings "
                           f"({graph.persistent_bindings[0].input_name} <- "
                           f"{graph.persistent_bindings[0].output_name}, ...)")

    try:
        merged = merged_decoder.inline_with_past_branch(model)
    except merged_decoder.MergedDecoderError as e:
        raise PrepareError(str(e)) from None

    if explicit is not None:
        pairs, conventions = explicit, {}
    else:
        candidates = find_pairs(model)
        if not candidates:
            raise PrepareError(
                f"found no past/present pairs in '{in_path}' by the known naming conventions "
                f"({', '.join(p + '* -> ' + q + '*' for p, q, _ in CONVENTIONS)}); name them "
                f"with --bind past=present ...")
        if bind is None:
            if confirm is None:
                raise PrepareError(
                    f"found {len(candidates)} past/present pairs but cannot ask for "
                    f"confirmation (not interactive): pass --bind auto to accept them or "
                    f"--bind past=present ... to name them")
            if not confirm(candidates):
                raise PrepareError("pairs not confirmed; nothing written (pass --bind auto to "
                               "accept them or --bind past=present ... to name them)")
        pairs = [(c.past, c.present) for c in candidates]
        conventions = {c.past: c.convention for c in candidates}
    _check_pairs(graph, pairs)

    # External data: referenced relative to the model file; OUT refers to the same files.
    locations: set = set()
    _external_locations(graph, locations)
    in_dir = os.path.dirname(os.path.abspath(in_path))
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if os.path.exists(out_path) and os.path.samefile(in_path, out_path):
        raise PrepareError(f"output '{out_path}' is the input; write a new file")
    data_paths = {os.path.normpath(os.path.join(in_dir, loc)) for loc in locations}
    if os.path.abspath(out_path) in data_paths:
        raise PrepareError(f"output '{out_path}' is the model's external data file")
    if locations and os.path.realpath(in_dir) != os.path.realpath(out_dir):
        raise PrepareError(
            f"output '{out_path}' must be in the input's directory '{in_dir}': its external "
            f"data ({', '.join(sorted(locations))}) is referenced relative to the model file "
            f"and is not copied")

    if paged not in (None, "cache", "rows"):
        raise PrepareError(f"paged must be 'cache' or 'rows', got {paged!r}")
    undefined_before = _undefined_inputs(graph)
    if paged is not None:
        report = _prepare_paged(model, in_path, out_path, pairs, conventions,
                                undefined_before, sorted(locations), rows=paged == "rows",
                                flags=merged.conditions if merged else (), stage=stage)
        report.merged = str(merged) if merged else None
        return report
    stage("answering the caches' Shape reads")
    rewrites = make_single_use(model, [p for p, _ in pairs])
    stage("folding static shapes (onnx shape inference)")
    static = fold_static_shapes(model, bound=[p for p, _ in pairs])
    _check_defined(graph, undefined_before)
    for past, present in pairs:
        b = graph.persistent_bindings.add()
        b.input_name = past
        b.output_name = present

    checks = []
    tmp = os.path.join(out_dir, f".{os.path.basename(out_path)}.tmp-{os.getpid()}")
    try:
        stage("writing")
        ol.save_model(model, tmp)
        if check_onnx:
            stage("checking with the onnx checker")
            checks.append(_onnx_check(tmp, in_path))
        stage("checking the bindings on onnx-light")
        checks.append(_state_check(tmp, pairs))
        if merged:
            stage("checking the first steps against onnxruntime on the merged file")
            try:
                checks.append(merged_decoder.check_first_steps(in_path, tmp, pairs,
                                                               merged.conditions))
            except merged_decoder.MergedDecoderError as e:
                raise PrepareError(str(e)) from None
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return PrepareReport(in_path, out_path, [tuple(p) for p in pairs], conventions, rewrites,
                         sorted(locations), checks, static, str(merged) if merged else None)


def _prepare_paged(model, in_path, out_path, pairs, conventions, undefined_before, locations,
                   rows: bool, flags=(), stage=lambda _: None) -> PrepareReport:
    """The paged rewrite (paged_rewrite.py): written only when the logits check passes."""
    from onnx_light import onnx as ol
    from onnx_light import paged_rewrite

    inputs_before = [i.name for i in model.graph.input]
    # Shape/Size reads of the caches (the batch size for a Reshape, the past length for the
    # mask) answered from other inputs first, as for dense caches: then the append is the
    # caches' only reader and the rewrite replaces it.
    stage("answering the caches' Shape reads")
    shape_rewrites = make_single_use(model, [p for p, _ in pairs])
    _check_defined(model.graph, undefined_before)
    stage("rewriting the attention onto PagedAttention")
    try:
        layers = paged_rewrite.rewrite(model, pairs, rows=rows,
                                       model_dir=os.path.dirname(os.path.abspath(in_path)))
    except paged_rewrite.PagedRewriteError as e:
        raise PrepareError(f"cannot rewrite the attention onto PagedAttention: {e}") from None
    _check_defined(model.graph, undefined_before)
    dropped = paged_rewrite.removed_inputs(inputs_before, model.graph)
    cache_inputs = {n for p in pairs for n in p[:1]}
    rewrites = list(shape_rewrites) + [Rewrite("PagedAttention", f"{l.past}/paged_attention", l.past,
                        f"attention of {l.past_key} / {l.past_value} on one paged cache "
                        + ("per batch row" if rows else "per layer")
                        + (f", each query seeing the last {l.window} keys (the export's sliding "
                           f"window)" if l.window else "")) for l in layers]
    rewrites += [Rewrite("input", name, name, "dropped (no node reads it after the rewrite)")
                 for name in dropped if name not in cache_inputs]
    bound = [(l.past, l.present) for l in layers]
    out_dir = os.path.dirname(os.path.abspath(out_path))
    tmp = os.path.join(out_dir, f".{os.path.basename(out_path)}.tmp-{os.getpid()}")
    checks = []
    try:
        stage("writing")
        ol.save_model(model, tmp)
        stage("checking the logits against onnxruntime on the original")
        try:
            checks.append(paged_rewrite.verify(in_path, tmp, layers, rows, flags=flags))
        except paged_rewrite.PagedRewriteError as e:
            raise PrepareError(str(e)) from None
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return PrepareReport(in_path, out_path, bound, {l.past: conventions.get(l.past_key,
                                                                            "named explicitly")
                                                    for l in layers},
                         rewrites, locations, checks)


def _onnx_check(path: str, original: str) -> str:
    """The onnx checker on the written file (it reads the graph only; external data files are
    resolved from the file's directory; the bindings are unknown fields to it); skipped
    without the onnx package."""
    try:
        import onnx
    except ImportError:
        return "onnx checker skipped (onnx not installed)"
    def first_line(e):
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__

    try:
        onnx.checker.check_model(path)
    except onnx.checker.ValidationError as e:
        try:
            onnx.checker.check_model(original)
        except onnx.checker.ValidationError as before:
            # Not ours: e.g. onnxruntime's SimplifiedLayerNormalization in the default domain.
            return f"onnx checker not applicable (the input fails it too: {first_line(before)})"
        raise PrepareError(f"the onnx checker rejects the prepared graph: {first_line(e)}") \
            from None
    return "onnx checker ok"


def _state_check(path: str, pairs) -> str:
    """Loads the written file (external references resolve from its directory) and builds
    a PersistentValueState with empty initial values of the declared types: the onnx-light
    checker validates the bindings (names, types, one use each)."""
    import numpy as np

    from onnx_light import onnx as ol
    from onnx_light.onnx_py._onnxpykernels import runtime

    try:
        model = ol.load_model(path)
    except Exception as e:  # noqa: BLE001
        raise PrepareError(f"the prepared model does not load: {e}") from None
    declared = {i.name: i for i in model.graph.input}
    initial = {}
    for past, _ in pairs:
        t = declared[past].type.tensor_type
        dtype = _numpy_dtype(t.elem_type)
        dims = _dims(declared[past])
        if dtype is None or dims is None:
            initial = None  # the check without values still validates the declaration
            break
        initial[past] = np.zeros([d.dim_value if d.HasField("dim_value") else 0 for d in dims],
                                 dtype)
    try:
        state = runtime.PersistentValueState(model, initial)
        state.close()
    except Exception as e:  # noqa: BLE001
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if initial is None and "missing initial value" in message:
            return "onnx-light bindings check ok (no initial values built)"
        raise PrepareError(f"onnx-light rejects the prepared model: {message}") from None
    return "onnx-light PersistentValueState ok"


# --- command line -------------------------------------------------------------------------

def _ask(candidates) -> bool:
    print(f"found {len(candidates)} past/present pairs:")
    for c in candidates:
        print(f"  {c.past} <- {c.present}  ({c.convention})")
    try:
        answer = input("bind these pairs? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def add_arguments(parser) -> None:
    parser.add_argument("input", help="the exported decoder (.onnx)")
    parser.add_argument("-o", "--output", required=True,
                        help="the prepared model; in the input's directory when the input "
                             "has external data (it refers to the same data file)")
    parser.add_argument("--bind", nargs="+", metavar="auto|PAST=PRESENT",
                        help="'auto' accepts the pairs found by naming convention without "
                             "asking; PAST=PRESENT ... names every pair (nothing guessed)")
    parser.add_argument("--no-onnx-check", action="store_true",
                        help="skip the onnx package's checker")
    parser.add_argument("--paged", choices=["cache", "rows"],
                        help="rewrite each layer's attention onto ai.rt::PagedAttention: one "
                             "paged cache per layer ('cache') or one per batch row ('rows', "
                             "for the batched RequestScheduler); checked by logits against "
                             "the original on onnxruntime")


def _interactive() -> bool:
    """Whether a user can answer: stdin is a terminal. A closed stdin (sys.stdin None, or a
    closed file) is not, so prepare refuses at once instead of failing or waiting."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        return False


class TerminalProgress:
    """The stage prepare is in and the seconds so far, on one line of a terminal, redrawn
    twice a second (a check on a large model takes minutes) and erased when done."""

    def __init__(self, stream):
        import threading

        self._stream, self._start, self._stage, self._width = stream, time.monotonic(), "", 0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def __call__(self, stage: str) -> None:
        with self._lock:
            self._stage = stage
            self._draw()

    def _draw(self) -> None:
        if self._stage:
            text = f"prepare: {self._stage} ({time.monotonic() - self._start:.0f} s)"
            self._stream.write("\r" + text.ljust(self._width))
            self._stream.flush()
            self._width = len(text)

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                self._draw()

    def _erase(self) -> None:
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0

    def asking(self, ask: Callable[[list], bool]) -> Callable[[list], bool]:
        """`ask` with the line erased and not redrawn while it waits for the answer."""
        def wrapped(candidates):
            with self._lock:
                self._erase()
                stage, self._stage = self._stage, ""
            try:
                return ask(candidates)
            finally:
                with self._lock:
                    self._stage = stage
        return wrapped

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._erase()


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (ValueError, OSError):
        return False


def run(args) -> int:
    confirm = _ask if args.bind is None and _interactive() else None
    progress = TerminalProgress(sys.stderr) if _stderr_is_terminal() else None
    if progress and confirm:
        confirm = progress.asking(confirm)
    try:
        report = prepare_decoder(args.input, args.output, bind=args.bind, confirm=confirm,
                                 check_onnx=not args.no_onnx_check, paged=args.paged,
                                 progress=progress)
    except (PrepareError, OSError, RuntimeError, ValueError) as e:
        if progress:
            progress.close()
        message = " ".join(str(e).split()) or type(e).__name__
        print(f"onnx_light prepare: error: {message}", file=sys.stderr)
        return 2
    if progress:
        progress.close()
    print(report.format())
    return 0


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m onnx_light prepare",
                                     description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
