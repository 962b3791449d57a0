"""Merged decoders (Hugging Face Optimum's ``decoder_model_merged.onnx``, what many Hub
repositories ship): one ``If`` on a BOOL graph input (``use_cache_branch``) chooses between
the decoder without a past (the first step) and the one with a past (every later step).

The with-past graph computes the first step too, from empty caches (the form Optimum writes
today as ``model.onnx``), so ``prepare`` keeps that branch alone (`inline_with_past_branch`):
its nodes replace the ``If``, its initializers and value_info move to the outer graph, the
condition input goes, and so do the initializers only the other branch read. The caches are
then graph inputs read by top-level nodes, which the bindings, the single-use rewrite and the
fusions need (they do not look inside a branch), and ``generate`` has no flag to feed.

The merged file's shared inputs (input_ids, attention_mask, ...) carry the no-past decoder's
declared shapes, where the attention mask's length is the sequence length; with a past it is
the total length. The mask's symbolic dimensions are renamed apart (except those the caches
declare too, such as the batch size), so no later step equates the two.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["MergedBranch", "MergedDecoderError", "inline_with_past_branch", "check_first_steps"]


@dataclasses.dataclass(frozen=True)
class MergedBranch:
    """What `inline_with_past_branch` did."""
    if_nodes: tuple      # the Ifs replaced by their with-past branch
    conditions: tuple    # the BOOL inputs removed (use_cache_branch)

    def __str__(self) -> str:
        return (f"kept the with-past branch of If {', '.join(repr(x) for x in self.if_nodes)} "
                f"(a merged decoder; that branch takes the first step too, from empty caches) "
                f"and removed the input {', '.join(repr(c) for c in self.conditions)}")


class MergedDecoderError(ValueError):
    """A merged-decoder `If` whose branches cannot be told apart; names the node."""


def _subgraphs(node) -> list:
    graphs = []
    for a in node.attribute:
        graphs.extend(a.graphs)
        if a.HasField("g"):
            graphs.append(a.g)
    return graphs


def _outer_reads(graph, scope: set, out: set) -> None:
    """Names `graph` (and its subgraphs) read that it does not define itself."""
    local = set(scope)
    local.update(i.name for i in graph.input)
    local.update(t.name for t in graph.initializer)
    for n in graph.node:
        local.update(o for o in n.output if o)
    for n in graph.node:
        out.update(x for x in n.input if x and x not in local)
        for g in _subgraphs(n):
            _outer_reads(g, local, out)
    out.update(o.name for o in graph.output if o.name not in local)


def _branch(node, name: str):
    for a in node.attribute:
        if a.name == name and a.HasField("g"):
            return a.g
    return None


def _rename(graph, old: str, new: str) -> None:
    """Every reference to `old` in `graph` and its subgraphs (a capture counts)."""
    for n in graph.node:
        for i, x in enumerate(n.input):
            if x == old:
                n.input[i] = new
        for i, x in enumerate(n.output):
            if x == old:
                n.output[i] = new
        for g in _subgraphs(n):
            _rename(g, old, new)
    for v in list(graph.output) + list(graph.value_info):
        if v.name == old:
            v.name = new
    for t in graph.initializer:
        if t.name == old:
            t.name = new


def _condition_ifs(graph) -> list:
    """(index, node) of the top-level Ifs whose condition is a BOOL graph input."""
    bool_inputs = {i.name for i in graph.input
                   if i.type.HasField("tensor_type") and i.type.tensor_type.elem_type == 9}
    bool_inputs -= {t.name for t in graph.initializer}
    return [(k, n) for k, n in enumerate(graph.node)
            if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.input
            and n.input[0] in bool_inputs]


def _choose(node, inputs: set):
    """(with-past branch, the inputs only it reads): the branch reading strictly more graph
    inputs than the other, which reads a subset of them."""
    then_g, else_g = _branch(node, "then_branch"), _branch(node, "else_branch")
    if then_g is None or else_g is None or not (
            len(then_g.output) == len(else_g.output) == len(node.output)):
        raise MergedDecoderError(
            f"If node '{node.name}' on input '{node.input[0]}' lacks a branch or has branches "
            f"of other output counts than its {len(node.output)} outputs")
    reads = []
    for g in (then_g, else_g):
        r: set = set()
        _outer_reads(g, set(), r)
        reads.append(r & inputs)
    for mine, other, g in ((reads[0], reads[1], then_g), (reads[1], reads[0], else_g)):
        extra = mine - other
        if other <= mine and extra and all(x.lower().startswith("past") for x in extra):
            return g, extra
    raise MergedDecoderError(
        f"If node '{node.name}' on input '{node.input[0]}': neither branch reads the other's "
        f"graph inputs plus past inputs (then reads {sorted(reads[0])}, else "
        f"{sorted(reads[1])}), so it is not a merged decoder prepare can take")


def _inline(graph, index: int, node, branch, taken: set) -> None:
    """Replaces graph.node[index] (the If) by `branch`'s nodes; locals that clash with
    names outside are renamed apart first."""
    produced = [o for n in branch.node for o in n.output if o]
    produced += [t.name for t in branch.initializer]
    outputs = dict(zip([o.name for o in branch.output], node.output))
    for name in produced:
        if name in taken and outputs.get(name) != name:
            fresh, k = f"{name}__with_past", 1
            while fresh in taken:
                fresh, k = f"{name}__with_past{k}", k + 1
            _rename(branch, name, fresh)
            taken.add(fresh)
    local = {o for n in branch.node for o in n.output if o}
    extra = []
    for out, target in zip([o.name for o in branch.output], node.output):
        if not target or out == target:
            continue
        if out in local and sum(1 for o in branch.output if o.name == out) == 1:
            _rename(branch, out, target)
        else:  # an outer name or an output given twice: an Identity gives it its name
            extra.append(type(node)(op_type="Identity", input=[out], output=[target],
                                    name=f"{node.name}/{target}"))
    nodes = [_copy(n) for n in graph.node]
    nodes[index:index + 1] = [_copy(n) for n in branch.node] + extra
    initializers = [_copy(t) for t in branch.initializer]
    value_info = [_copy(v) for v in branch.value_info]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(initializers)
    graph.value_info.extend(value_info)


def _copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out


def _all_reads(graph, out: set) -> None:
    for n in graph.node:
        out.update(x for x in n.input if x)
        for g in _subgraphs(n):
            _all_reads(g, out)
    out.update(o.name for o in graph.output)


def _drop_unread(graph, condition: str) -> None:
    reads: set = set()
    _all_reads(graph, reads)
    keep = [t for t in graph.initializer if t.name in reads]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    if condition not in reads:
        inputs = [i for i in graph.input if i.name != condition]
        del graph.input[:]
        graph.input.extend(inputs)


def _total_length_symbol(graph) -> str:
    """The symbol every present* output declares for its length (axis 2), or ''."""
    symbols = {o.type.tensor_type.shape.dim[2].dim_param for o in graph.output
               if o.name.startswith("present") and o.type.HasField("tensor_type")
               and len(o.type.tensor_type.shape.dim) == 4}
    return symbols.pop() if len(symbols) == 1 else ""


def _rename_mask_symbols(graph, past_only: set) -> None:
    """The attention mask's symbols, but those the caches declare too, renamed apart: with a
    past its length is the total one, not the sequence length input_ids declares (every
    other input of a decoder, position_ids and the like, is as long as input_ids both ways).
    Its last axis takes the caches' total length symbol, which prepare already equates with
    it (the past length is the mask's length minus the new tokens')."""
    keep, declared = set(), set()
    for i in graph.input:
        if i.type.HasField("tensor_type"):
            symbols = {d.dim_param for d in i.type.tensor_type.shape.dim if d.dim_param}
            declared |= symbols
            if i.name in past_only:
                keep |= symbols
    total = _total_length_symbol(graph)
    for i in graph.input:
        if "attention_mask" not in i.name or not i.type.HasField("tensor_type"):
            continue
        dims = i.type.tensor_type.shape.dim
        for axis, d in enumerate(dims):
            if d.dim_param and d.dim_param not in keep:
                last = axis == len(dims) - 1
                d.dim_param = total if last and total and total not in declared \
                    else f"{i.name}_dim{axis}"


def inline_with_past_branch(model) -> Optional[MergedBranch]:
    """Keeps the with-past branch of a merged decoder's `If` (see the module docstring);
    returns what it did, or None when the model has no such If. Raises MergedDecoderError
    for an If on a BOOL graph input whose branches are not a no-past/with-past pair."""
    graph = model.graph
    inputs = {i.name for i in graph.input}
    conditions = set()
    for _, node in _condition_ifs(graph):
        try:
            _choose(node, inputs)
        except MergedDecoderError:
            if "use_cache" in node.input[0]:
                raise
            continue  # some other flag: not ours to remove
        conditions.add(node.input[0])
    if not conditions:
        return None
    for condition in conditions:
        for n in graph.node:
            if condition in n.input and (n.op_type != "If" or n.input[0] != condition
                                         or list(n.input).count(condition) > 1):
                raise MergedDecoderError(
                    f"input '{condition}' chooses a merged decoder's branch but "
                    f"{n.op_type} node '{n.name}' reads it too; prepare keeps the with-past "
                    f"branch only when the flag does nothing else")
    taken: set = set(inputs) | {t.name for t in graph.initializer}
    for n in graph.node:
        taken.update(o for o in n.output if o)
    past_only: set = set()
    names = []
    while True:
        pending = [(k, n) for k, n in _condition_ifs(graph) if n.input[0] in conditions]
        if not pending:
            break
        index, node = pending[0]
        branch, extra = _choose(node, inputs)
        past_only |= extra
        names.append(node.name)
        _inline(graph, index, node, branch, taken)
    for condition in conditions:
        _drop_unread(graph, condition)
    _rename_mask_symbols(graph, past_only)
    return MergedBranch(tuple(names), tuple(sorted(conditions)))


def check_first_steps(original_path, prepared_path, pairs, conditions, steps: int = 2,
                      tolerance: float = 1e-4) -> str:
    """The prepared model (with-past branch only, empty caches first) on onnx-light against
    the merged original on onnxruntime, its flag False on a 6-token prompt (the no-past
    branch) and True on `steps` greedy steps after: logits within tolerance * max(1,
    |logits|), else MergedDecoderError. Skipped without onnxruntime or for inputs beyond
    input_ids, attention_mask, position_ids, the caches and the flags."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "merged-decoder check skipped (onnxruntime not installed)"
    import numpy as np

    from onnx_light import onnx as ol
    from onnx_light.onnx_py._onnxpykernels import runtime

    session = ort.InferenceSession(str(original_path), providers=["CPUExecutionProvider"])
    caches = {}
    for i in session.get_inputs():
        if i.name in dict(pairs):
            dims = [d if isinstance(d, int) else 0 for d in i.shape]
            if len(dims) != 4 or not dims[1] or not dims[3]:
                return f"merged-decoder check skipped ('{i.name}' declares {i.shape})"
            dtype = np.float16 if i.type == "tensor(float16)" else np.float32
            caches[i.name] = np.zeros((1, dims[1], 0, dims[3]), dtype)
    names = {i.name for i in session.get_inputs()}
    extra = names - {"input_ids", "attention_mask", "position_ids"} - set(caches) - set(conditions)
    if extra:
        return f"merged-decoder check skipped (inputs {sorted(extra)})"
    outputs = [o.name for o in session.get_outputs()]
    state = runtime.PersistentValueState(ol.load_model(str(prepared_path)), caches)
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    ids = np.random.default_rng(0).integers(0, 100, (1, 6), dtype=np.int64)
    start, worst = 0, 0.0
    for step in range(steps + 1):
        total = start + ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.arange(start, total, dtype=np.int64)[None]}
        feeds = {k: v for k, v in feeds.items() if k in names}
        theirs = dict(zip(outputs, session.run(outputs, {
            **feeds, **caches, **{c: np.array([step > 0]) for c in conditions}})))
        try:
            got = np.from_dlpack(state.run(context, feeds)["logits"]).astype(np.float64)
        except (ValueError, RuntimeError, NotImplementedError) as e:
            raise MergedDecoderError(
                f"the with-past branch does not run from empty caches at step {step} ({e}); "
                f"nothing written") from None
        expected = theirs["logits"].astype(np.float64)
        if got.shape != expected.shape:
            raise MergedDecoderError(f"step {step}: logits {list(got.shape)} against the merged "
                                     f"original's {list(expected.shape)}")
        scale = max(1.0, float(np.abs(expected).max()))
        worst = max(worst, float(np.abs(got - expected).max()) / scale)
        limit = max(tolerance, 4 * float(np.finfo(theirs["logits"].dtype).eps))
        if worst > limit:
            raise MergedDecoderError(
                f"the with-past branch on empty caches does not give the merged original's "
                f"logits at step {step} (relative difference {worst:.2e}, limit {limit:g}; "
                f"step 0 is the original's no-past branch); nothing written")
        caches = {past: theirs[present] for past, present in pairs}
        start, ids = total, expected[:, -1].argmax(-1)[:, None].astype(np.int64)
    state.close()
    return (f"the with-past branch alone gives the merged original's logits (onnxruntime, its "
            f"no-past branch on the prompt) within {worst:.1e} over a 6-token prompt and "
            f"{steps} decode steps")
