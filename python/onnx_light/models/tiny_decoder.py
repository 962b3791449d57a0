"""A tiny Llama-style decoder (RMSNorm, SiLU MLP, causal multi-head ONNX Attention with a KV
cache), with random weights from a fixed seed, written with standard ONNX operators
(opset 23).

Each call takes any number of new tokens (input_ids/position_ids [batch, seq]): the prompt in
one call, then one token per call. The KV cache is fed back through
``graph.persistent_bindings`` (past_key_i <- present_key_i, past_value_i <- present_value_i),
so the runtime keeps it between calls; Attention's bottom-right causal alignment makes the
same graph right for both prompt and decode steps.

``build_tiny_decoder(proto)`` works with any module exposing the ONNX message classes:
``onnx_light.onnx`` (the default) or the ``onnx`` package itself (for onnxruntime).
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class TinyDecoderConfig:
    vocab_size: int = 95  # the printable ASCII characters (demo)
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_size: int = 128
    max_positions: int = 512
    rms_eps: float = 1e-5
    seed: int = 0
    # Attention over paged caches (ai.rt::PagedAttention, one cache past_i <- present_i per
    # layer) instead of ONNX Attention over contiguous past_key_i/past_value_i tensors.
    paged: bool = False
    # With paged: past_i/present_i are sequences of paged caches, one per batch row (each
    # row attends its own cache from its own length; runtime.run_rows batches requests).
    row_caches: bool = False
    # Key/value heads (grouped-query attention when fewer than num_heads); 0 = num_heads.
    num_kv_heads: int = 0

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads


def _tensor(proto, name: str, array: np.ndarray):
    t = proto.TensorProto()
    t.name = name
    t.data_type = {np.dtype(np.float32): 1, np.dtype(np.int64): 7}[array.dtype]
    t.dims.extend(array.shape)
    t.raw_data = np.ascontiguousarray(array).tobytes()
    return t


def _value_info(proto, name: str, elem_type: int, dims):
    v = proto.ValueInfoProto()
    v.name = name
    tt = v.type.tensor_type
    tt.elem_type = elem_type
    for d in dims:
        dim = tt.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d
    return v


class _Graph:
    def __init__(self, proto, graph):
        self.proto = proto
        self.graph = graph
        self.count = 0

    def node(self, op: str, inputs, outputs=None, domain: str = "", **attrs) -> str:
        self.count += 1
        n = self.graph.node.add()
        n.op_type = op
        n.domain = domain
        n.name = f"{op.lower()}_{self.count}"
        n.input.extend(inputs)
        outputs = outputs or [f"{n.name}_out"]
        n.output.extend(outputs)
        for key, value in attrs.items():
            a = n.attribute.add()
            a.name = key
            if isinstance(value, int):
                a.type = self.proto.AttributeProto.INT
                a.i = value
            elif isinstance(value, float):
                a.type = self.proto.AttributeProto.FLOAT
                a.f = value
            else:
                a.type = self.proto.AttributeProto.INTS
                a.ints.extend(value)
        return outputs[0]

    def init(self, name: str, array: np.ndarray) -> str:
        self.graph.initializer.append(_tensor(self.proto, name, array))
        return name


def build_tiny_decoder(proto=None, config: TinyDecoderConfig = TinyDecoderConfig()):
    """Returns a ModelProto of ``proto`` (default: onnx_light.onnx) with bindings declared."""
    if proto is None:
        from onnx_light import onnx as proto  # noqa: PLW0621
    c = config
    rng = np.random.default_rng(c.seed)

    def weight(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    model = proto.ModelProto()
    model.ir_version = 10
    model.producer_name = "onnx-light tiny decoder"
    opset = model.opset_import.add()
    opset.domain = ""
    opset.version = 23
    if c.paged:
        if not hasattr(proto.GraphProto(), "persistent_bindings"):
            raise ValueError("a paged tiny decoder needs onnx_light.onnx (structured caches are "
                             "an onnx-light extension)")
        rt = model.opset_import.add()
        rt.domain = "ai.rt"
        rt.version = 1
    graph = model.graph
    graph.name = "tiny_decoder"
    g = _Graph(proto, graph)

    FLOAT, INT64 = 1, 7
    graph.input.append(_value_info(proto, "input_ids", INT64, ["batch", "seq"]))
    graph.input.append(_value_info(proto, "position_ids", INT64, ["batch", "seq"]))
    graph.output.append(_value_info(proto, "logits", FLOAT, ["batch", "seq", c.vocab_size]))
    cache_dims = ["batch", c.kv_heads, "past", c.head_size]
    present_dims = ["batch", c.kv_heads, "total", c.head_size]
    for i in range(c.num_layers):
        if c.paged:
            for value in (graph.input.add(name=f"past_{i}"), graph.output.add(name=f"present_{i}")):
                cache = value.type.sequence_type.elem_type if c.row_caches else value.type
                cache.struct_type.name = "cache"
            graph.persistent_bindings.add(input_name=f"past_{i}", output_name=f"present_{i}")
            continue
        for kind in ("key", "value"):
            graph.input.append(_value_info(proto, f"past_{kind}_{i}", FLOAT, cache_dims))
            graph.output.append(_value_info(proto, f"present_{kind}_{i}", FLOAT, present_dims))
            b = graph.persistent_bindings.add() if hasattr(graph, "persistent_bindings") else None
            if b is not None:
                b.input_name = f"past_{kind}_{i}"
                b.output_name = f"present_{kind}_{i}"

    axes_last = g.init("axes_last", np.array([-1], np.int64))
    eps = g.init("rms_eps", np.array(c.rms_eps, np.float32))
    split_heads = g.init("split_heads", np.array([0, 0, c.num_heads, c.head_size], np.int64))
    split_kv = g.init("split_kv", np.array([0, 0, c.kv_heads, c.head_size], np.int64))
    merge_heads = g.init("merge_heads", np.array([0, 0, c.hidden_size], np.int64))

    def rms_norm(x: str, name: str) -> str:
        gain = g.init(f"{name}_gain", (1.0 + 0.1 * rng.standard_normal(c.hidden_size)).astype(np.float32))
        sq = g.node("Mul", [x, x])
        ms = g.node("ReduceMean", [sq, axes_last], keepdims=1)
        rms = g.node("Sqrt", [g.node("Add", [ms, eps])])
        return g.node("Mul", [g.node("Div", [x, rms]), gain])

    def heads(x: str, split: str = split_heads) -> str:  # [b, s, n * head] -> [b, n, s, head]
        return g.node("Transpose", [g.node("Reshape", [x, split])], perm=[0, 2, 1, 3])

    embed = weight(c.vocab_size, c.hidden_size, scale=1.0)
    g.init("embed_tokens", embed)
    positions = g.init("embed_positions", weight(c.max_positions, c.hidden_size, scale=0.1))
    h = g.node("Add", [g.node("Gather", ["embed_tokens", "input_ids"], axis=0),
                       g.node("Gather", [positions, "position_ids"], axis=0)])
    for i in range(c.num_layers):
        n = rms_norm(h, f"l{i}_attn_norm")
        q = heads(g.node("MatMul", [n, g.init(f"l{i}_wq", weight(c.hidden_size, c.hidden_size))]))
        kv_size = c.kv_heads * c.head_size
        wk, wv = (g.init(f"l{i}_w{s}", weight(c.hidden_size, kv_size)) for s in "kv")
        k = heads(g.node("MatMul", [n, wk]), split_kv)
        v = heads(g.node("MatMul", [n, wv]), split_kv)
        if c.paged:
            attn = g.node("PagedAttention", [q, k, v, f"past_{i}"], [f"attn_{i}", f"present_{i}"],
                          domain="ai.rt", max_tokens=c.max_positions)
        else:
            attn = g.node("Attention", [q, k, v, "", f"past_key_{i}", f"past_value_{i}"],
                          [f"attn_{i}", f"present_key_{i}", f"present_value_{i}"], is_causal=1)
        attn = g.node("Transpose", [attn], perm=[0, 2, 1, 3])
        attn = g.node("MatMul", [g.node("Reshape", [attn, merge_heads]),
                                 g.init(f"l{i}_wo", weight(c.hidden_size, c.hidden_size))])
        h = g.node("Add", [h, attn])
        n = rms_norm(h, f"l{i}_mlp_norm")
        up = g.node("MatMul", [n, g.init(f"l{i}_w1", weight(c.hidden_size, c.mlp_size))])
        act = g.node("Mul", [up, g.node("Sigmoid", [up])])
        down = g.node("MatMul", [act, g.init(f"l{i}_w2", weight(c.mlp_size, c.hidden_size))])
        h = g.node("Add", [h, down])
    n = rms_norm(h, "final_norm")
    # The head is the embedding shifted by one token (plus noise), so the untrained model
    # still "continues" its input: token t most likely predicts t + 1, perturbed by the
    # attention and MLP paths. That makes the demo's output recognisable and checkable.
    head = 0.35 * np.roll(embed, 1, axis=0).T
    head += weight(c.hidden_size, c.vocab_size, scale=0.5)
    g.node("MatMul", [n, g.init("lm_head", head.astype(np.float32))], ["logits"])
    return model


def empty_cache(config: TinyDecoderConfig = TinyDecoderConfig(), batch: int = 1) -> dict:
    """Initial (empty-prefix) cache values for every bound input."""
    if config.paged and config.row_caches:
        return {f"past_{i}": [{"blocks": []} for _ in range(batch)]
                for i in range(config.num_layers)}
    if config.paged:
        return {f"past_{i}": {"blocks": []} for i in range(config.num_layers)}
    shape = (batch, config.kv_heads, 0, config.head_size)
    return {f"past_{kind}_{i}": np.zeros(shape, np.float32)
            for i in range(config.num_layers) for kind in ("key", "value")}
