"""onnx_light.prepare (`python -m onnx_light prepare`): a raw torch.onnx (dynamo) export of the
tiny Llama with a KV cache, as the exporter writes it (Shape reads of some caches included),
becomes an onnx-light model with persistent_bindings whose bound inputs have one use each:
it then generates under runtime.generate the greedy tokens of onnxruntime on the ORIGINAL file,
with the same logits within 1e-4, without copying the external data. Explicit pairs, each
exporter's naming, Size reads, a second consumer (read through one Identity) and every
refusal (unknown name, a capture or graph output beside another use, an underivable
dimension, no confirmation, stdin closed, an output elsewhere than its data) are checked
through the function and the command line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light import prepare
from onnx_light.onnx_py._onnxpykernels import runtime

ARCH = "llama"
LAYERS, KV_HEADS, HEAD_DIM = export_hf.cache_shape(ARCH)
PAIRS = export_hf.cache_names(LAYERS)
NEW_TOKENS = 8
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory):
    """A private copy of the raw export (graph + data file) in its own directory."""
    source = export_hf.ensure(ARCH, with_cache=True, raw=True)
    out = tmp_path_factory.mktemp("raw")
    shutil.copy(source, out / "model.onnx")
    shutil.copy(source + ".data", out / os.path.basename(source + ".data"))
    return out


@pytest.fixture(scope="module")
def prepared(raw_dir):
    report = prepare.prepare_decoder(raw_dir / "model.onnx", raw_dir / "prepared.onnx",
                                     bind="auto")
    return raw_dir / "model.onnx", raw_dir / "prepared.onnx", report


def _cache_reads(path) -> int:
    model = onnx.load(path, load_external_data=False)
    caches = {i.name for i in model.graph.input if i.name.startswith("past_key_values.")}
    return sum(1 for n in model.graph.node
               if n.op_type in ("Shape", "Size") and n.input[0] in caches)


def _uses(model, name) -> int:
    return sum(1 for n in model.graph.node for x in n.input if x == name) + \
        sum(1 for o in model.graph.output if o.name == name)


def _ort_greedy(path, ids, new_tokens):
    """onnxruntime on `path`: prompt, then one token per call with the presents fed back.
    Returns the tokens and each call's last-position logits."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cache = export_hf.empty_cache(ARCH, ids.shape[0])
    mask = np.ones_like(ids)
    positions = np.arange(ids.shape[1], dtype=np.int64)[None].repeat(ids.shape[0], 0)
    step_ids, tokens, logits = ids, [ids], []
    for _ in range(new_tokens):
        out = dict(zip(names, session.run(None, {"input_ids": step_ids, "attention_mask": mask,
                                                 "position_ids": positions, **cache})))
        last = out["logits"][:, -1]
        top2 = np.sort(last, axis=-1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0]).min() >= 1e-4, "near-tie: choose another prompt"
        logits.append(last)
        step_ids = last.argmax(-1)[:, None].astype(np.int64)
        cache = {past: out[present] for past, present in PAIRS}
        mask = np.concatenate([mask, np.ones_like(step_ids)], axis=1)
        positions = positions[:, -1:] + 1
        tokens.append(step_ids)
    return np.concatenate(tokens, axis=1), logits


def test_prepared_export_generates_onnxruntimes_tokens_and_logits(prepared):
    raw, out, report = prepared
    assert report.pairs == PAIRS
    model = ol_onnx.load_model(str(out))
    assert [(b.input_name, b.output_name) for b in model.graph.persistent_bindings] == PAIRS
    ids = np.random.default_rng(1).integers(1, 128, size=(1, 7), dtype=np.int64)
    expected, expected_logits = _ort_greedy(raw, ids, NEW_TOKENS)

    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    options = runtime.GenerationOptions(max_new_tokens=NEW_TOKENS)
    tokens = np.from_dlpack(runtime.generate(model, context,
                                             {"input_ids": ids, **export_hf.empty_cache(ARCH)},
                                             options))
    np.testing.assert_array_equal(tokens, expected)

    # Step by step on the bound model: the same logits as onnxruntime on the raw file.
    state = runtime.PersistentValueState(model, export_hf.empty_cache(ARCH))
    step_ids, total = ids, 0
    for step in range(NEW_TOKENS):
        total += step_ids.shape[1]
        positions = np.arange(total - step_ids.shape[1], total, dtype=np.int64)[None]
        out_values = state.run(context, {"input_ids": step_ids,
                                         "attention_mask": np.ones((1, total), np.int64),
                                         "position_ids": positions},
                               output_names=["logits"])
        last = np.from_dlpack(out_values["logits"])[:, -1]
        assert np.abs(last - expected_logits[step]).max() <= 1e-4, step
        step_ids = expected[:, ids.shape[1] + step:ids.shape[1] + step + 1]
    state.close()


def test_rewrites_every_shape_read_of_a_cache_and_leaves_one_use(prepared):
    raw, out, report = prepared
    reads = _cache_reads(raw)
    assert reads > 0  # the exporter reads batch and past length off some caches
    assert len(report.rewrites) == reads
    assert {r.input_name for r in report.rewrites} <= {p for p, _ in PAIRS}
    assert _cache_reads(out) == 0
    model = onnx.load(str(out), load_external_data=False)
    for past, _ in PAIRS:
        assert _uses(model, past) == 1, past
    # The graph outputs are those of the export, in order, with the same types.
    original = onnx.load(str(raw), load_external_data=False)
    assert [o.SerializeToString() for o in model.graph.output] == \
        [o.SerializeToString() for o in original.graph.output]
    assert "onnx checker ok" in report.checks
    assert "onnx-light PersistentValueState ok" in report.checks


def test_external_data_is_referenced_not_copied(prepared):
    raw, out, report = prepared
    directory = os.path.dirname(out)
    data = os.path.basename(export_hf.ensure(ARCH, with_cache=True, raw=True)) + ".data"
    assert sorted(os.listdir(directory)) == sorted(["model.onnx", data, "prepared.onnx"])
    assert report.external_data == [data]
    # The new graph is the old one plus a few nodes and the bindings, no weight bytes.
    assert os.path.getsize(out) <= os.path.getsize(raw) + 16384
    model = onnx.load(str(out), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {data}
    assert all(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer
               if t.external_data)


def test_explicit_pairs_bind_exactly_those(raw_dir):
    raw = raw_dir / "model.onnx"
    first_layer = [p for p in PAIRS if p[0].startswith("past_key_values.0.")]
    out = raw_dir / "layer0.onnx"
    report = prepare.prepare_decoder(raw, out, bind=[f"{a}={b}" for a, b in first_layer])
    assert report.pairs == first_layer and report.conventions == {}
    model = onnx.load(str(out), load_external_data=False)
    original = onnx.load(str(raw), load_external_data=False)
    # Only reads of the bound inputs are rewritten; the other caches keep theirs.
    bound_reads = sum(1 for n in original.graph.node if n.op_type == "Shape"
                      and n.input[0] in {a for a, _ in first_layer})
    assert len(report.rewrites) == bound_reads
    assert _cache_reads(out) == _cache_reads(raw) - bound_reads
    assert [(b.input_name, b.output_name)
            for b in ol_onnx.load_model(str(out)).graph.persistent_bindings] == first_layer
    assert len(model.graph.node) >= len(original.graph.node)
    os.remove(out)


def test_a_confirmation_callback_sees_the_candidates(raw_dir):
    seen = []

    def refuse(candidates):
        seen.extend(candidates)
        return False

    with pytest.raises(prepare.PrepareError, match="not confirmed"):
        prepare.prepare_decoder(raw_dir / "model.onnx", raw_dir / "x.onnx", confirm=refuse)
    assert [(c.past, c.present) for c in seen] == PAIRS
    assert all("past_key_values.* -> present.*" in c.convention for c in seen)
    assert not os.path.exists(raw_dir / "x.onnx")


def test_refusals(raw_dir, tmp_path):
    raw = raw_dir / "model.onnx"
    with pytest.raises(prepare.PrepareError, match="unknown name 'past_key_values.9.key'"):
        prepare.prepare_decoder(raw, raw_dir / "x.onnx",
                                bind=["past_key_values.9.key=present.0.key"])
    with pytest.raises(prepare.PrepareError, match="no output 'present.9.key'"):
        prepare.prepare_decoder(raw, raw_dir / "x.onnx",
                                bind=[("past_key_values.0.key", "present.9.key")])
    with pytest.raises(prepare.PrepareError, match="pass --bind auto"):
        prepare.prepare_decoder(raw, raw_dir / "x.onnx")  # no bind, no confirm
    with pytest.raises(prepare.PrepareError, match="must be in the input's directory"):
        prepare.prepare_decoder(raw, tmp_path / "x.onnx", bind="auto")
    with pytest.raises(prepare.PrepareError, match="is the input"):
        prepare.prepare_decoder(raw, raw, bind="auto")
    # A folder stands for its one .onnx file; an empty one is named (not "no such file").
    with pytest.raises(prepare.PrepareError, match="is a directory with no .onnx file in it"):
        prepare.prepare_decoder(tmp_path, raw_dir / "x.onnx", bind="auto")
    assert not os.path.exists(raw_dir / "x.onnx") and not os.listdir(tmp_path)
    one = tmp_path / "one"
    one.mkdir()
    for name in os.listdir(raw_dir):
        if name == "model.onnx" or name.endswith(".data"):  # the graph and its data
            os.symlink(raw_dir / name, one / name)
    with pytest.raises(prepare.PrepareError, match="'.*/one/model.onnx' is the input"):
        prepare.prepare_decoder(one, one / "model.onnx", bind="auto")
    os.symlink(raw, one / "other.onnx")
    with pytest.raises(prepare.PrepareError, match=r"several models \(model.onnx, other.onnx\)"):
        prepare.prepare_decoder(one, one / "x.onnx", bind="auto")


PAST, PRESENT = "past_key_values.0.key", "present.0.key"


def _tiny(path, extra_nodes, extra_outputs, past_dims=("batch", 2, "past", 4)):
    """PAST [batch, 2, past, 4] -> PRESENT = Concat(PAST, new) along axis 2, plus extra
    nodes reading PAST; input_ids [batch, seq] and attention_mask [batch, total] declared."""
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Unsqueeze", ["ids_f", "axes"], ["ids_u"], name="unsqueeze"),
        helper.make_node("Expand", ["ids_u", "expand_shape"], ["new"], name="expand"),
        helper.make_node("Concat", [PAST, "new"], [PRESENT], axis=2, name="concat"),
    ] + extra_nodes
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
         helper.make_tensor_value_info(PAST, TensorProto.FLOAT, list(past_dims))],
        [helper.make_tensor_value_info(PRESENT, TensorProto.FLOAT, ["batch", 2, "total", 4])]
        + extra_outputs,
        initializer=[helper.make_tensor("axes", TensorProto.INT64, [2], [1, 3]),
                     helper.make_tensor("expand_shape", TensorProto.INT64, [4], [1, 2, 1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _same_on_onnxruntime(original, prepared):
    """Runs both files on onnxruntime for several batch/past/seq sizes and checks that every
    output agrees (shape and values); yields (session of the prepared file, feeds, batch,
    past) for each size so the caller can check more."""
    before = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"])
    for batch, past, seq in [(1, 0, 3), (2, 5, 1), (3, 2, 4)]:
        feeds = {"input_ids": np.ones((batch, seq), np.int64),
                 "attention_mask": np.ones((batch, past + seq), np.int64),
                 PAST: np.zeros((batch, 2, past, 4), np.float32)}
        for x, y in zip(before.run(None, feeds), after.run(None, feeds)):
            assert x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        yield after, feeds, batch, past


def test_shape_and_size_reads_are_answered_from_other_inputs(tmp_path):
    """Shape without attributes, Shape [1:3] and Size of the cache, as outputs: the same
    values from onnxruntime on the original and on the prepared file (which ignores the
    bindings), for several batch/past/seq sizes."""
    path = _tiny(tmp_path / "m.onnx",
                 [helper.make_node("Shape", [PAST], ["shape"], name="shape_all"),
                  helper.make_node("Shape", [PAST], ["dims"], start=1, end=-1,
                                   name="shape_mid"),
                  helper.make_node("Size", [PAST], ["size"], name="size")],
                 [helper.make_tensor_value_info("shape", TensorProto.INT64, [4]),
                  helper.make_tensor_value_info("dims", TensorProto.INT64, [2]),
                  helper.make_tensor_value_info("size", TensorProto.INT64, [])])
    report = prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")
    assert report.pairs == [(PAST, PRESENT)]
    assert [(r.op_type, r.node_name) for r in report.rewrites] == \
        [("Shape", "shape_all"), ("Shape", "shape_mid"), ("Size", "size")]
    for after, feeds, batch, past in _same_on_onnxruntime(path, tmp_path / "p.onnx"):
        assert after.run(["size"], feeds)[0] == batch * 2 * past * 4


def test_a_second_consumer_reads_one_identity_of_the_cache(tmp_path):
    """A second node reading the cache (a ReduceSum beside the Concat), plus a Shape read:
    both readers read one Identity of it, so the cache has one use; onnxruntime gives the
    same outputs on the original and the prepared file, and onnx-light's bound state gives
    the sum of the previous call's present."""
    path = _tiny(tmp_path / "m.onnx",
                 [helper.make_node("ReduceSum", [PAST], ["total_sum"], name="sum_past",
                                   keepdims=0),
                  helper.make_node("Shape", [PAST], ["shape"], name="shape_all")],
                 [helper.make_tensor_value_info("total_sum", TensorProto.FLOAT, []),
                  helper.make_tensor_value_info("shape", TensorProto.INT64, [4])])
    report = prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")
    assert [(r.op_type, r.input_name) for r in report.rewrites] == [("Shape", PAST),
                                                                     ("Identity", PAST)]
    assert report.rewrites[1].answer == ("one Identity read by its 2 readers "
                                         "(Concat 'concat', ReduceSum 'sum_past')")
    prepared = onnx.load(str(tmp_path / "p.onnx"))
    assert _uses(prepared, PAST) == 1
    for _ in _same_on_onnxruntime(path, tmp_path / "p.onnx"):
        pass
    model = ol_onnx.load_model(str(tmp_path / "p.onnx"))
    state = runtime.PersistentValueState(model, {PAST: np.zeros((1, 2, 0, 4), np.float32)})
    context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(18)))
    previous = 0.0
    for total, ids in ((3, [[1, 2, 3]]), (4, [[5]]), (5, [[7]])):
        out = state.run(context, {"input_ids": np.array(ids, np.int64),
                                  "attention_mask": np.ones((1, total), np.int64)})
        assert float(np.from_dlpack(out["total_sum"])) == previous
        previous = float(np.from_dlpack(out[PRESENT]).sum())
    state.close()


def test_a_graph_output_beside_another_use_is_refused_naming_input_and_output(tmp_path):
    path = _tiny(tmp_path / "m.onnx", [], [helper.make_tensor_value_info(
        PAST, TensorProto.FLOAT, ["batch", 2, "past", 4])])
    with pytest.raises(prepare.PrepareError,
                       match=r"input 'past_key_values.0.key' has a second use that prepare "
                             r"cannot rewrite: graph output 'past_key_values.0.key' \(its "
                             r"first use is Concat node 'concat' \(input 0\)\)"):
        prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")
    assert not os.path.exists(tmp_path / "p.onnx")


def test_an_underivable_dimension_is_refused_naming_input_and_node(tmp_path):
    path = _tiny(tmp_path / "m.onnx",
                 [helper.make_node("Shape", [PAST], ["head"], start=3, name="head_dim")],
                 [helper.make_tensor_value_info("head", TensorProto.INT64, [1])],
                 past_dims=("batch", 2, "past", "head_size"))
    with pytest.raises(prepare.PrepareError,
                       match=r"dimension 3 \('head_size'\) of input "
                             r"'past_key_values.0.key'.*Shape node 'head_dim'"):
        prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")


def _gathered_shape(path, index_nodes, gathers, outputs):
    """_tiny with a symbolic head dimension ('head_size'), its whole Shape read only by
    `gathers` [(indices name, output name)]."""
    nodes = index_nodes + [helper.make_node("Shape", [PAST], ["past_shape"], name="shape")]
    nodes += [helper.make_node("Gather", ["past_shape", i], [o], axis=0, name=f"gather_{o}")
              for i, o in gathers]
    return _tiny(path, nodes, outputs, past_dims=("batch", 2, "past", "head_size"))


def test_a_shape_read_only_by_gathers_needs_only_the_gathered_dimensions(tmp_path):
    """The builder's fp16 pattern: Shape of the whole cache, whose head dimension is
    symbolic and not derivable, read only by Gathers of constant indices (a Constant node
    and an initializer, scalar and 1-D, a negative index). Each Gather is answered from the
    dimensions it reads and the Shape is dropped; onnxruntime gives the same values on the
    original and the prepared file."""
    path = _gathered_shape(
        tmp_path / "m.onnx",
        [helper.make_node("Constant", [], ["two"], name="two",
                          value=helper.make_tensor("two", TensorProto.INT64, [], [2])),
         helper.make_node("Constant", [], ["batch_and_past"], name="batch_and_past",
                          value=helper.make_tensor("v", TensorProto.INT64, [2], [0, -2]))],
        [("two", "past_len"), ("batch_and_past", "dims")],
        [helper.make_tensor_value_info("past_len", TensorProto.INT64, []),
         helper.make_tensor_value_info("dims", TensorProto.INT64, [2])])
    report = prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")
    assert [(r.op_type, r.node_name, r.answer) for r in report.rewrites] == [
        ("Shape", "shape", "Gather 'gather_past_len' <- attention_mask dim 1 - input_ids dim 1; "
                           "Gather 'gather_dims' <- input_ids dim 0, "
                           "attention_mask dim 1 - input_ids dim 1")]
    prepared = onnx.load(str(tmp_path / "p.onnx"))
    assert _uses(prepared, PAST) == 1
    for after, feeds, batch, past in _same_on_onnxruntime(path, tmp_path / "p.onnx"):
        assert after.run(["dims"], feeds)[0].tolist() == [batch, past]


def test_a_gathered_underivable_dimension_or_another_reader_is_refused(tmp_path):
    head = helper.make_tensor("three", TensorProto.INT64, [], [3])
    path = _gathered_shape(
        tmp_path / "m.onnx",
        [helper.make_node("Constant", [], ["three"], name="three", value=head)],
        [("three", "head")], [helper.make_tensor_value_info("head", TensorProto.INT64, [])])
    with pytest.raises(prepare.PrepareError,
                       match=r"dimension 3 \('head_size'\) of input "
                             r"'past_key_values.0.key'.*Shape node 'shape'"):
        prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")
    path = _tiny(tmp_path / "m2.onnx",
                 [helper.make_node("Shape", [PAST], ["past_shape"], name="shape")],
                 [helper.make_tensor_value_info("past_shape", TensorProto.INT64, [4])],
                 past_dims=("batch", 2, "past", "head_size"))
    with pytest.raises(prepare.PrepareError, match=r"dimension 3 \('head_size'\)"):
        prepare.prepare_decoder(path, tmp_path / "p2.onnx", bind="auto")


def test_genai_builder_model_binds_without_rewrites_and_generates():
    """The onnxruntime-genai builder's fp32 Llama: its caches feed GroupQueryAttention once
    each, so prepare only binds them; the prepared file then generates onnxruntime's greedy
    tokens on the original."""
    import json

    from models import genai_builder

    path = genai_builder.ensure("llama", "fp32")
    out = os.path.join(os.path.dirname(path), "prepared-test.onnx")
    try:
        report = prepare.prepare_decoder(path, out, bind="auto")
        pasts = [i for i in onnx.load(path, load_external_data=False).graph.input
                 if i.name.startswith("past_key_values.")]
        assert len(report.pairs) == len(pasts) > 0 and report.rewrites == []
        assert all(present == past.replace("past_key_values.", "present.")
                   for past, present in report.pairs)
        with open(os.path.join(os.path.dirname(path), "genai_config.json")) as f:
            head_size = json.load(f)["model"]["decoder"]["head_size"]
        cache = {p.name: np.zeros((1, p.type.tensor_type.shape.dim[1].dim_value, 0, head_size),
                                  np.float32) for p in pasts}
        ids = np.random.default_rng(2).integers(3, 120, (1, 6), dtype=np.int64)
        context = runtime.RuntimeContext(runtime.KernelContext(runtime.default_opset(21)))
        tokens = np.from_dlpack(runtime.generate(
            ol_onnx.load_model(out), context, {"input_ids": ids, **cache},
            runtime.GenerationOptions(max_new_tokens=NEW_TOKENS)))
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        step, expected, total = ids, [ids], 0
        for _ in range(NEW_TOKENS):
            total += step.shape[1]
            result = dict(zip(names, session.run(None, {
                "input_ids": step, "attention_mask": np.ones((1, total), np.int64), **cache})))
            last = result["logits"][:, -1]
            top2 = np.sort(last, axis=-1)[:, -2:]
            assert (top2[:, 1] - top2[:, 0]).min() >= 1e-4, "near-tie: choose another prompt"
            step = last.argmax(-1)[:, None].astype(np.int64)
            expected.append(step)
            cache = {k: result[k.replace("past_key_values.", "present.")] for k in cache}
        np.testing.assert_array_equal(tokens, np.concatenate(expected, axis=1))
    finally:
        if os.path.exists(out):
            os.remove(out)


def _cli(*args, stdin=subprocess.DEVNULL, preexec_fn=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")]
                                        + env.get("PYTHONPATH", "").split(os.pathsep))
    return subprocess.run([sys.executable, "-m", "onnx_light", "prepare", *map(str, args)],
                          capture_output=True, text=True, env=env, stdin=stdin, timeout=300,
                          preexec_fn=preexec_fn)


def test_cli_prints_pairs_and_rewrites(raw_dir):
    out = raw_dir / "cli.onnx"
    result = _cli(raw_dir / "model.onnx", "-o", out, "--bind", "auto")
    assert result.returncode == 0, result.stderr
    for past, present in PAIRS:
        assert f"{past} <- {present}" in result.stdout
    assert f"rewrote {_cache_reads(raw_dir / 'model.onnx')} nodes" in result.stdout
    assert os.path.exists(out)
    os.remove(out)


def test_cli_binds_explicit_pairs_without_asking(raw_dir):
    out = raw_dir / "cli-explicit.onnx"
    first_layer = [p for p in PAIRS if p[0].startswith("past_key_values.0.")]
    result = _cli(raw_dir / "model.onnx", "-o", out, "--bind",
                  *[f"{a}={b}" for a, b in first_layer])
    assert result.returncode == 0, result.stderr
    assert f"bound {len(first_layer)} past/present pairs (named explicitly):" in result.stdout
    assert [(b.input_name, b.output_name)
            for b in ol_onnx.load_model(str(out)).graph.persistent_bindings] == first_layer
    os.remove(out)


def test_cli_refuses_with_a_one_line_message(raw_dir):
    result = _cli(raw_dir / "model.onnx", "-o", raw_dir / "cli.onnx")  # stdin not a TTY
    assert result.returncode != 0
    assert "--bind auto" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = _cli(raw_dir / "model.onnx", "-o", raw_dir / "cli.onnx", "--bind",
                  "nope=present.0.key")
    assert result.returncode != 0
    assert "unknown name 'nope'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not os.path.exists(raw_dir / "cli.onnx")


def test_cli_with_stdin_closed_refuses_at_once_asking_for_bind(raw_dir):
    """No terminal to ask on (file descriptor 0 closed, so Python has no sys.stdin): prepare
    neither waits nor fails with a traceback; it refuses in one line that names --bind."""
    result = _cli(raw_dir / "model.onnx", "-o", raw_dir / "cli.onnx",
                  preexec_fn=lambda: os.close(0))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"onnx_light prepare: error: found {len(PAIRS)} past/present pairs but cannot ask for "
        "confirmation (not interactive): pass --bind auto to accept them or --bind "
        "past=present ... to name them"]
    assert not os.path.exists(raw_dir / "cli.onnx")


def test_a_large_external_weight_is_not_read(tmp_path):
    """A 512 MiB external initializer (a sparse file): preparing the model in a fresh process
    raises its peak RSS by far less than the weight (the graph alone is read and written)."""
    rows, cols = 8192, 16384
    weight = TensorProto(name="weight", data_type=TensorProto.FLOAT, dims=[rows, cols],
                         data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "weights.bin"), ("offset", "0"),
                       ("length", str(rows * cols * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    with open(tmp_path / "weights.bin", "wb") as f:
        f.truncate(rows * cols * 4)
    graph = helper.make_graph(
        [helper.make_node("Concat", [PAST, "new"], [PRESENT], axis=2),
         helper.make_node("Shape", [PAST], ["batch"], end=1),
         helper.make_node("MatMul", ["x", "weight"], ["y"])],
        "large",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
         helper.make_tensor_value_info("new", TensorProto.FLOAT, ["batch", 2, "seq", 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows]),
         helper.make_tensor_value_info(PAST, TensorProto.FLOAT, ["batch", 2, "past", 4])],
        [helper.make_tensor_value_info(PRESENT, TensorProto.FLOAT, ["batch", 2, "total", 4]),
         helper.make_tensor_value_info("batch", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, str(tmp_path / "large.onnx"))

    script = ("import resource, sys\n"
              "import numpy, onnx, onnx_light.onnx\n"
              "from onnx_light import prepare\n"
              "from onnx_light.onnx_py._onnxpykernels import runtime\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "if sys.argv[1] == 'prepare':\n"
              "    report = prepare.prepare_decoder(sys.argv[2], sys.argv[3], bind='auto')\n"
              "    assert len(report.rewrites) == 1, report\n"
              "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "print((after - before) // 1024)\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")]
                                        + env.get("PYTHONPATH", "").split(os.pathsep))
    result = subprocess.run([sys.executable, "-c", script, "prepare",
                             str(tmp_path / "large.onnx"), str(tmp_path / "out.onnx")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    growth_mib = int(result.stdout.split()[-1])
    assert growth_mib < 64, growth_mib  # the weight is 512 MiB
    assert os.path.getsize(tmp_path / "out.onnx") < 64 * 1024
    assert sorted(os.listdir(tmp_path)) == ["large.onnx", "out.onnx", "weights.bin"]


@pytest.mark.parametrize("answer, code", [("y", 0), ("n", 2)])
def test_cli_asks_on_a_terminal(raw_dir, answer, code):
    import pty

    master, slave = pty.openpty()
    try:
        os.write(master, (answer + "\n").encode())
        result = _cli(raw_dir / "model.onnx", "-o", raw_dir / "asked.onnx", stdin=slave)
    finally:
        os.close(slave)
        os.close(master)
    assert result.returncode == code, result.stderr
    assert "bind these pairs? [y/N]" in result.stdout
    assert f"{PAIRS[0][0]} <- {PAIRS[0][1]}" in result.stdout
    assert os.path.exists(raw_dir / "asked.onnx") == (code == 0)
    if code:
        assert "not confirmed" in result.stderr
    else:
        os.remove(raw_dir / "asked.onnx")


def test_progress_names_each_stage_as_it_starts(raw_dir):
    stages = []
    prepare.prepare_decoder(raw_dir / "model.onnx", raw_dir / "staged.onnx", bind="auto",
                            progress=stages.append)
    os.remove(raw_dir / "staged.onnx")
    assert stages == ["reading the graph", "answering the caches' Shape reads",
                      "folding static shapes (onnx shape inference)", "writing",
                      "checking with the onnx checker", "checking the bindings on onnx-light"]


def test_cli_shows_its_stage_on_a_terminal_and_erases_it(raw_dir):
    """On a terminal (stderr), one line names the stage and the seconds so far, redrawn in
    place ("\\r"), and is blanked before the report; piped, stderr stays empty."""
    import pty

    master, slave = pty.openpty()
    try:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python")]
                                            + env.get("PYTHONPATH", "").split(os.pathsep))
        result = subprocess.run([sys.executable, "-m", "onnx_light", "prepare",
                                 str(raw_dir / "model.onnx"), "-o", str(raw_dir / "tty.onnx"),
                                 "--bind", "auto"], stdout=subprocess.PIPE, stderr=slave,
                                stdin=subprocess.DEVNULL, text=True, env=env, timeout=300)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert result.returncode == 0
    text = shown.decode()
    assert "\rprepare: reading the graph (0 s)" in text
    assert "\rprepare: checking the bindings on onnx-light (" in text
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and last[-2].strip() == ""  # erased: blanks, then back to column 0
    assert "bound " in result.stdout
    os.remove(raw_dir / "tty.onnx")
    piped = _cli(raw_dir / "model.onnx", "-o", raw_dir / "piped.onnx", "--bind", "auto")
    assert piped.returncode == 0 and piped.stderr == ""
    os.remove(raw_dir / "piped.onnx")


def test_a_capture_in_a_subgraph_is_a_second_use(tmp_path):
    def branch(name, source):
        return helper.make_graph(
            [helper.make_node("ReduceSum", [source], [name + "_out"], keepdims=0)], name, [],
            [helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, [])])

    path = _tiny(tmp_path / "m.onnx",
                 [helper.make_node("Constant", [], ["cond"],
                                   value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
                  helper.make_node("If", ["cond"], ["chosen"], name="maybe_sum",
                                   then_branch=branch("then", PAST),
                                   else_branch=branch("else", "new"))],
                 [helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [])])
    with pytest.raises(prepare.PrepareError,
                       match=r"second use.*If node 'maybe_sum' \(captured in its subgraph "
                             r"'then_branch'\)"):
        prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto")


def test_a_rewrite_that_leaves_an_undefined_input_is_refused(tmp_path, monkeypatch):
    """prepare's own structural check (the onnx checker is skipped for inputs that fail it
    anyway, e.g. onnxruntime's contrib ops in the default domain): a node reading a value
    that nothing defines is refused, naming the node and the value, and nothing is written."""
    path = _tiny(tmp_path / "m.onnx",
                 [helper.make_node("Shape", [PAST], ["shape"], name="shape_all")],
                 [helper.make_tensor_value_info("shape", TensorProto.INT64, [4])])
    real = prepare.make_single_use

    def broken(model, inputs, known_dims=None):
        rewrites = real(model, inputs, known_dims)
        model.graph.node.add().CopyFrom(
            helper.make_node("Identity", ["nowhere"], ["unused"], name="dangling"))
        return rewrites

    monkeypatch.setattr(prepare, "make_single_use", broken)
    with pytest.raises(prepare.PrepareError,
                       match=r"left Identity node 'dangling' reading 'nowhere', which nothing "
                             r"defines \(1 such inputs\); nothing written"):
        prepare.prepare_decoder(path, tmp_path / "p.onnx", bind="auto", check_onnx=False)
    assert not os.path.exists(tmp_path / "p.onnx")


def test_undefined_inputs_see_enclosing_scopes():
    """A subgraph may read its enclosing graph's values (a capture); an undefined name
    inside a subgraph is reported with its node."""
    body = helper.make_graph([helper.make_node("Add", ["outer_x", "missing"], ["y"], name="add")],
                             "body", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                        [1])])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["outer_x"], name="id"),
         helper.make_node("If", ["cond"], ["z"], name="if", then_branch=body, else_branch=body)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    assert prepare._undefined_inputs(graph) == {("Add node 'add'", "missing")}


def _named_io(inputs, outputs):
    """A graph with only the given input and output names (find_pairs reads names only)."""
    value = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, None)  # noqa: E731
    return helper.make_model(helper.make_graph([], "names", [value("input_ids")]
                                               + [value(n) for n in inputs],
                                               [value("logits")] + [value(n) for n in outputs]))


@pytest.mark.parametrize("inputs, outputs, label", [
    # Optimum (`optimum-cli export onnx`), torch.onnx dynamo and the onnxruntime-genai builder
    # all name the caches past_key_values.N.key/value -> present.N.key/value.
    (["past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key"],
     ["present.0.key", "present.0.value", "present.1.key"], "past_key_values.* -> present.*"),
    (["past_key_values.0.key"], ["present_key_values.0.key"],
     "past_key_values.* -> present_key_values.*"),
    (["past_key_values_0_key"], ["present_0_key"], "past_key_values_* -> present_*"),
    (["past.0.key"], ["present.0.key"], "past.* -> present.*"),
    (["past_0"], ["present_0"], "past_* -> present_*"),
])
def test_find_pairs_knows_each_exporters_naming(inputs, outputs, label):
    pairs = prepare.find_pairs(_named_io(inputs, outputs))
    assert [(c.past, c.present) for c in pairs] == list(zip(inputs, outputs))
    assert all(label in c.convention for c in pairs)


def test_find_pairs_refuses_a_cache_input_no_output_matches():
    with pytest.raises(prepare.PrepareError, match=r"input 'past_key_values.0.key' looks like "
                                                   r"a cache but no graph output matches it"):
        prepare.find_pairs(_named_io(["past_key_values.0.key"], ["kv_out.0.key"]))
