"""Merged decoders (Optimum's decoder_model_merged.onnx: an If on the BOOL input
use_cache_branch between the no-past and the with-past decoder, shared weights in the outer
graph; tests/python/models/merged_decoder.py builds them from TorchScript exports). onnx-light
runs one as written, like onnxruntime; `prepare` keeps the with-past branch alone (checked
against the merged original), after which generate, the fusions and the batched scheduler
work as on Optimum's single-file export of the same weights."""
from __future__ import annotations

import collections
import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from models import export_hf, hub_variants, merged_decoder
from onnx import TensorProto, helper

from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

PROMPT = [3, 44, 18, 91, 27, 60, 2, 77]
NEW_TOKENS = 8


def step_feeds(ids, start):
    total = start + len(ids)
    return {"input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            "position_ids": np.arange(start, total, dtype=np.int64)[None]}


def empty_cache(arch, dtype=np.float32):
    layers, kv, head = export_hf.cache_shape(arch)
    return {p: np.zeros((1, kv, 0, head), dtype) for p, _ in export_hf.cache_names(layers)}


def onnxruntime_greedy(path, arch, dtype=np.float32):
    """Greedy tokens and each step's logits of the merged file on onnxruntime, as Optimum
    runs it: use_cache_branch False on the prompt (the no-past branch), True after."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    pairs = export_hf.cache_names(export_hf.cache_shape(arch)[0])
    cache, tokens, ids, start, logits = empty_cache(arch, dtype), list(PROMPT), list(PROMPT), 0, []
    for _ in range(NEW_TOKENS):
        out = dict(zip(names, session.run(None, {**step_feeds(ids, start), **cache,
                                                 "use_cache_branch": np.array([start > 0])})))
        logits.append(out["logits"])
        last = out["logits"][0, -1].astype(np.float32)
        top2 = np.sort(last)[-2:]
        assert top2[1] - top2[0] >= max(8 * float(np.spacing(dtype(top2[1]))), 1e-4), \
            "near-tie: choose another prompt"
        start += len(ids)
        tokens.append(int(last.argmax()))
        ids = [tokens[-1]]
        cache = {p: out[q] for p, q in pairs}
    return tokens, logits


def kernels_of_a_decode_step(path, arch):
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)),
                                     events_enabled=True)
    state = runtime.PersistentValueState(ol_onnx.load_model(str(path)), initial=empty_cache(arch))
    state.run(context, step_feeds(PROMPT, 0))
    before = len(context.events())
    state.run(context, step_feeds([5], len(PROMPT)))
    return collections.Counter(e.op_type for e in context.events()[before:]
                               if e.action == runtime.RuntimeEventAction.kKernel)


def test_onnx_light_runs_a_merged_decoder_as_written():
    """No prepare: the If and its two branches run, the flag fed by hand as Optimum does;
    each step's logits are onnxruntime's on the same file."""
    path = merged_decoder.ensure("llama")
    tokens, expected = onnxruntime_greedy(path, "llama")
    model = ol_onnx.load_model(path)
    state = runtime.PersistentValueState(model, {})
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    pairs = export_hf.cache_names(export_hf.cache_shape("llama")[0])
    cache, ids, start = empty_cache("llama"), list(PROMPT), 0
    for step in range(NEW_TOKENS):
        out = state.run(context, {**step_feeds(ids, start), **cache,
                                  "use_cache_branch": np.array([step > 0])})
        out = {k: np.from_dlpack(v).copy() for k, v in out.items()}
        np.testing.assert_allclose(out["logits"], expected[step], atol=1e-5, rtol=0)
        cache = {p: out[q] for p, q in pairs}
        start += len(ids)
        ids = [tokens[len(PROMPT) + step]]


@pytest.mark.parametrize("arch,kind", [("llama", "fp32"), ("qwen2", "fp32"), ("gpt2", "fp32"),
                                       ("llama", "fp16"), ("llama", "q4"), ("llama", "bnb4")])
def test_a_prepared_merged_decoder_generates_onnxruntimes_tokens(tmp_path, arch, kind):
    """prepare keeps the with-past branch (the If and use_cache_branch are gone, the report
    says so, its check compared the result with the merged original), and generate from
    empty caches gives onnxruntime's greedy tokens on the merged file, for the float export
    and the variants onnxruntime's tools make of it (they convert inside the branches)."""
    path = merged_copy(tmp_path, arch)
    if kind != "fp32":
        path = hub_variants.convert(path, kind, str(tmp_path / f"merged_{kind}.onnx"))
    dtype = np.float16 if kind == "fp16" else np.float32
    expected, _ = onnxruntime_greedy(path, arch, dtype)
    prepared = tmp_path / "prepared.onnx"
    report = prepare.prepare_decoder(path, prepared, bind="auto")
    text = report.format()
    assert "kept the with-past branch of If 'optimum::if'" in text
    assert "removed the input 'use_cache_branch'" in text
    assert "the with-past branch alone gives the merged original's logits" in text
    graph = onnx.load(str(prepared), load_external_data=False).graph
    assert "If" not in {n.op_type for n in graph.node}
    assert "use_cache_branch" not in {i.name for i in graph.input}
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    tokens = runtime.generate(ol_onnx.load_model(str(prepared)), context,
                              {"input_ids": np.array([PROMPT], np.int64),
                               **empty_cache(arch, dtype)},
                              runtime.GenerationOptions(max_new_tokens=NEW_TOKENS))
    assert np.from_dlpack(tokens)[0].tolist() == expected


def test_a_prepared_merged_decoder_runs_the_kernels_of_the_single_file_export(tmp_path):
    """The same weights exported as one with-past file (Optimum's model.onnx) and as a merged
    decoder, both prepared: a decode step runs the same kernels, fused attention, norms and
    grouped products included (the mask's length is the caches' total length again, so the
    same Shape reads are answered)."""
    single = export_hf.ensure("llama", with_cache=True, raw=True, exporter="torchscript")
    prepare.prepare_decoder(merged_copy(tmp_path, None, single), tmp_path / "single.onnx",
                            bind="auto")
    prepare.prepare_decoder(merged_copy(tmp_path, "llama"), tmp_path / "merged.onnx",
                            bind="auto")
    ours = kernels_of_a_decode_step(tmp_path / "merged.onnx", "llama")
    assert ours == kernels_of_a_decode_step(tmp_path / "single.onnx", "llama")
    assert ours["ScaledDotProductAttention"] == export_hf.cache_shape("llama")[0]
    assert ours["If"] == 0


@pytest.mark.parametrize("kind", ["fp32", "q4f16"])
def test_a_merged_decoder_runs_batched_after_prepare_paged_rows(tmp_path, kind):
    """paged='rows' on a merged decoder: its logits check feeds the original's flag, and the
    RequestScheduler decodes the requests together, each getting the tokens it gets alone,
    onnxruntime's on the merged file."""
    from test_prepare_paged import check_scheduled_as_alone

    path = merged_copy(tmp_path, "llama")
    if kind != "fp32":
        path = hub_variants.convert(path, kind, str(tmp_path / f"merged_{kind}.onnx"))
    report = prepare.prepare_decoder(path, tmp_path / "rows.onnx", bind="auto", paged="rows")
    assert "removed the input 'use_cache_branch'" in report.format()
    model = ol_onnx.load_model(str(tmp_path / "rows.onnx"))
    layers = export_hf.cache_shape("llama")[0]
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    rng = np.random.default_rng(5)
    feeds = [{"input_ids": rng.integers(1, 128, (1, n), dtype=np.int64),
              **{f"past_key_values.{i}": [{"blocks": []}] for i in range(layers)}}
             for n in (4, 9, 2, 6)]
    assert check_scheduled_as_alone(model, context, path, feeds, "batched")["max_batch_size"] > 1


def merged_copy(tmp_path, arch, edit=None) -> str:
    """A copy of the merged decoder of `arch` in tmp_path beside its external data (prepare
    writes next to the input), its graph edited by `edit` first when given."""
    import os
    import shutil

    src = merged_decoder.ensure(arch) if arch else edit
    path = str(tmp_path / os.path.basename(src))
    shutil.copy(src + ".data", path + ".data")
    if edit is None or isinstance(edit, str):
        shutil.copy(src, path)
        return path
    model = onnx.load(src, load_external_data=False)
    edit(model)
    onnx.save(model, path)
    return path


def _branch(model, name):
    return next(a for a in model.graph.node[0].attribute if a.name == name)


def test_prepare_refuses_a_use_cache_if_whose_branches_are_not_a_no_past_with_past_pair(
        tmp_path):
    def both_without_past(model):
        _branch(model, "then_branch").g.CopyFrom(copy.deepcopy(_branch(model, "else_branch").g))

    path = merged_copy(tmp_path, "llama", both_without_past)
    with pytest.raises(prepare.PrepareError,
                       match=r"If node 'optimum::if' on input 'use_cache_branch': neither branch "
                             r"reads the other's graph inputs plus past inputs"):
        prepare.prepare_decoder(path, tmp_path / "out.onnx", bind="auto")
    assert not (tmp_path / "out.onnx").exists()


def test_prepare_refuses_a_merged_decoder_whose_flag_is_read_elsewhere(tmp_path):
    def flag_also_output(model):
        model.graph.node.append(helper.make_node("Not", ["use_cache_branch"], ["no_cache"],
                                                 name="flag_reader"))
        model.graph.output.append(helper.make_tensor_value_info("no_cache", TensorProto.BOOL,
                                                                [1]))

    path = merged_copy(tmp_path, "llama", flag_also_output)
    with pytest.raises(prepare.PrepareError,
                       match=r"input 'use_cache_branch' chooses a merged decoder's branch but "
                             r"Not node 'flag_reader' reads it too"):
        prepare.prepare_decoder(path, tmp_path / "out.onnx", bind="auto")


def test_an_if_on_another_flag_is_left_alone():
    """Only an If whose branches are a no-past/with-past pair (or one on a use_cache flag,
    refused when it is not) is a merged decoder: any other If on a BOOL input stays."""
    from onnx_light import merged_decoder as inliner

    def branch(name, value):
        return helper.make_graph(
            [helper.make_node("Add", ["x", value], [f"y_{name}"])], name, [],
            [helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, [2])],
            [helper.make_tensor(value, TensorProto.FLOAT, [2], [1.0, 2.0])])

    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="choose",
                          then_branch=branch("then", "a"), else_branch=branch("else", "b"))],
        "g", [helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = ol_onnx.ModelProto()
    model.ParseFromString(helper.make_model(graph).SerializeToString())
    before = model.SerializeToString()
    assert inliner.inline_with_past_branch(model) is None
    assert model.SerializeToString() == before


def test_prepare_refuses_a_merged_decoder_whose_branches_disagree(tmp_path):
    """The with-past branch stands in for the no-past one on the prompt only if both compute
    the same logits: a no-past branch that adds 1 to them is caught by prepare's check
    against the original, and nothing is written."""
    def no_past_shifted(model):
        g = _branch(model, "else_branch").g
        producer = next(n for n in g.node if "logits" in n.output)
        producer.output[list(producer.output).index("logits")] = "logits_raw"
        g.node.extend([helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
                           "one", TensorProto.FLOAT, [], [1.0])),
                       helper.make_node("Add", ["logits_raw", "one"], ["logits"])])

    path = merged_copy(tmp_path, "llama", no_past_shifted)
    with pytest.raises(prepare.PrepareError,
                       match=r"the with-past branch on empty caches does not give the merged "
                             r"original's logits at step 0 \(relative difference .*nothing "
                             r"written"):
        prepare.prepare_decoder(path, tmp_path / "out.onnx", bind="auto")
    assert not (tmp_path / "out.onnx").exists()


def test_prepare_refuses_a_malformed_merged_if_naming_it(tmp_path):
    """A merged decoder's If without its else branch, or with a branch short of outputs, is
    a PrepareError naming the node, not a crash."""
    def no_else(model):
        attrs = [a for a in model.graph.node[0].attribute if a.name != "else_branch"]
        del model.graph.node[0].attribute[:]
        model.graph.node[0].attribute.extend(attrs)

    def short_then(model):
        del _branch(model, "then_branch").g.output[-1]

    for edit in (no_else, short_then):
        path = merged_copy(tmp_path, "llama", edit)
        with pytest.raises(prepare.PrepareError,
                           match=r"If node 'optimum::if' on input 'use_cache_branch' lacks a "
                                 r"branch or has branches of other output counts"):
            prepare.prepare_decoder(path, tmp_path / "out.onnx", bind="auto")


def test_prepare_refuses_a_with_past_branch_that_cannot_start_from_empty_caches(tmp_path):
    """A with-past branch that needs a past token (here: it reads the past's first row with
    a Gather, which fails on an empty cache) cannot stand in for the no-past branch: prepare
    says so, naming the step, and writes nothing."""
    def needs_a_past_row(model):
        g = _branch(model, "then_branch").g
        g.node.extend([
            helper.make_node("Constant", [], ["row0"], value=helper.make_tensor(
                "row0", TensorProto.INT64, [], [0])),
            helper.make_node("Gather", ["past_key_values.0.value", "row0"], ["first_row"],
                             axis=2),
            helper.make_node("ReduceSum", ["first_row"], ["first_sum"], keepdims=0),
            helper.make_node("Add", ["logits_pre", "first_sum"], ["logits"])])
        producer = next(n for n in g.node if "logits" in n.output and n.op_type != "Add")
        producer.output[list(producer.output).index("logits")] = "logits_pre"

    path = merged_copy(tmp_path, "llama", needs_a_past_row)
    with pytest.raises(prepare.PrepareError,
                       match=r"the with-past branch does not run from empty caches at step 0 "
                             r"\(.*\); nothing written"):
        prepare.prepare_decoder(path, tmp_path / "out.onnx", bind="auto")
    assert not (tmp_path / "out.onnx").exists()
