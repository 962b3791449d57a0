"""Seed corpora for the libFuzzer harnesses (tests/fuzz/fuzz_*.cc), from the repository's own
test models. Needs the built package (`bash dev.sh build`):

    .venv/bin/python tests/fuzz/make_corpus.py [--out tests/fuzz/corpus] [--models-dir build/models]

Writes one folder per harness (model, text, paged_cache, encoded, state_feeds); files are
named by content hash, so a rerun adds nothing new. --models-dir adds the onnxruntime-genai
int4 decoders cached there by the pytest suite (tests/python/models/genai_builder.py), with
their external data inlined, when present. Total size stays well below 2 MB.
"""
from __future__ import annotations

import argparse
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

HEADER = '<ir_version: 10, opset_import: ["" : 18]>'
HEADER_MS = '<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1]>'

# Small text models beyond fuzz_models.TEXT_MODELS: control flow, contrib ops, attention.
EXTRA_TEXT_MODELS = [
    HEADER + 'g (float[2,4] x, float[4] s) => (float[2,4] y) '
    '{ y = LayerNormalization<axis=-1>(x, s) }',
    '<ir_version: 10, opset_import: ["" : 23]>'
    'g (float[1,2,3,4] q, float[1,2,5,4] k, float[1,2,5,4] v) => (float[1,2,3,4] y) '
    '{ y = Attention<is_causal=1>(q, k, v) }',
    HEADER_MS + 'g (float[1,3,8] x, float[1,3,8] skip, float[8] g) => (float[1,3,8] y) '
    '{ y = com.microsoft.SkipSimplifiedLayerNormalization<epsilon=0.00001>(x, skip, g) }',
    HEADER + 'g (bool c, float[2] x) => (float[2] y) '
    '{ y = If(c) <then_branch = t () => (float[2] a) { a = Identity(x) }, '
    'else_branch = e () => (float[2] b) { b = Neg(x) }> }',
    HEADER + 'g (int64 n, bool c, float[2] x) => (float[2] y) '
    '{ y = Loop(n, c, x) <body = b (int64 i, bool ci, float[2] xi) => (bool co, float[2] xo) '
    '{ co = Identity(ci) xo = Add(xi, xi) }> }',
    HEADER + 'g (float[2,3] x) => (float[2] y) { y = ReduceSum<keepdims=0>(x, axes) }'
    .replace("axes)", "a) ").replace("{ y", "<int64[1] a = {1}> { y"),
    HEADER + 'g (float[3,4] x, int64[2] idx) => (float[2,4] y) { y = Gather<axis=0>(x, idx) }',
    HEADER + 'g (float[2,3,4] x) => (float[2,4,3] y) { y = Transpose<perm=[0,2,1]>(x) }',
    HEADER + 'g (float[4,4] x) => (float[4,4] y) { y = Gemm<alpha=0.5, transB=1>(x, x) }',
    # onnxruntime's quantize_dynamic product (the plan fuses it to MatMulIntegerToFloat).
    HEADER + 'g (float[2,3] x) => (float[2,2] y) <int8[3,2] w = {1, -2, 3, 4, -5, 6}, '
    'float ws = {0.5}> { q, s, z = DynamicQuantizeLinear(x) m = MatMulInteger(q, w, z) '
    'c = Cast<to=1>(m) sc = Mul(s, ws) y = Mul(c, sc) }',
    # A FLOAT16 model's product: a constant FLOAT16 weight (read as 16 bits, panels kept).
    HEADER + 'g (float16[1,4] x) => (float16[1,16] y) <float16[4,16] w = {-5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4}> '
    '{ y = MatMul(x, w) }',
    # model_fp16's tied LM head: the Transpose of a FLOAT16 embedding folds to a view that
    # the MatMul packs on its first call, while the Gather reads the embedding's rows.
    HEADER + 'g (int64[1,2] ids) => (float16[1,2,16] y) <float16[16,4] w = {-5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4, 3, -1, -5, 2, -2, 5, 1, -3, 4, 0, -4}> '
    '{ h = Gather(w, ids) wt = Transpose<perm=[1,0]>(w) y = MatMul(h, wt) }',
    # model_bnb4's product: NF4 codes, two a byte, and a per-block absmax.
    HEADER_MS + 'g (float[2,32] a) => (float[2,2] y) <uint8[32] b = {0, 37, 74, 111, 148, 185, 222, 3, 40, 77, 114, 151, 188, 225, 6, 43, 80, 117, 154, 191, 228, 9, 46, 83, 120, 157, 194, 231, 12, 49, 86, 123}, float[1] am = {1.5}> '
    '{ y = com.microsoft.MatMulBnb4<K=32, N=2, block_size=64, quant_type=1>(a, b, am) }',
    # model_q4's q/k/v: MatMulNBits of one input (the plan groups them: MatMulNBitsGroup).
    HEADER_MS + 'g (float[2,32] a) => (float[2,2] y, float[2,2] z) <uint8[2,1,16] b = {5, 42, 79, 116, 153, 190, 227, 8, 45, 82, 119, 156, 193, 230, 11, 48, 85, 122, 159, 196, 233, 14, 51, 88, 125, 162, 199, 236, 17, 54, 91, 128}, float[2] s = {0.5, 0.25}, uint8[2,1,16] c = {17, 108, 199, 34, 125, 216, 51, 142, 233, 68, 159, 250, 85, 176, 11, 102, 193, 28, 119, 210, 45, 136, 227, 62, 153, 244, 79, 170, 5, 96, 187, 22}, float[2] t = {0.125, 2}> '
    '{ y = com.microsoft.MatMulNBits<K=32, N=2, bits=4, block_size=32>(a, b, s) '
    'z = com.microsoft.MatMulNBits<K=32, N=2, bits=4, block_size=32>(a, c, t) }',
]


def name_of(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def write(folder: Path, items: list[bytes]) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for data in items:
        (folder / name_of(data)).write_bytes(data)
    return len(items)


def text_models() -> list[str]:
    import fuzz_models

    out = [HEADER + t for t in fuzz_models.TEXT_MODELS]
    out.append(HEADER + fuzz_models.STATE_MODEL)
    out.extend(EXTRA_TEXT_MODELS)
    return out


def inline_external(path: Path):
    """A ModelProto (onnx_light.onnx) of `path` with external tensor data read in."""
    import onnx_light.onnx as ol

    model = ol.load_model(path.read_bytes())
    for t in model.graph.initializer:
        if t.data_location != 1:  # EXTERNAL
            continue
        info = {e.key: e.value for e in t.external_data}
        raw = (path.parent / info["location"]).read_bytes()
        off = int(info.get("offset", 0))
        n = int(info.get("length", len(raw) - off))
        t.raw_data = raw[off:off + n]
        del t.external_data[:]
        t.data_location = 0
    return model


def model_corpus(models_dir: Path | None) -> list[bytes]:
    from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder
    from onnx_light.onnx_lib import parser

    out = []
    for text in text_models():
        try:
            out.append(parser.parse_model(text).SerializeToString())
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"skipped a text model: {e}", file=sys.stderr)
    small = TinyDecoderConfig(vocab_size=16, hidden_size=8, num_heads=2, num_layers=1, mlp_size=16,
                              max_positions=8)
    out.append(build_tiny_decoder(config=small).SerializeToString())
    for p in sorted((REPO / "tests/data/text_parser").glob("*.pb")) + sorted(
            (REPO / "tests/data/text_parser").glob("*.onnx")):
        out.append(p.read_bytes())
    if models_dir is not None:
        for p in sorted(models_dir.glob("genai/*int4*/model.onnx")):
            out.append(inline_external(p).SerializeToString())
    return out


def text_corpus(models: list[bytes]) -> list[bytes]:
    from onnx_light.onnx_lib import printer
    import onnx_light.onnx as ol

    out = [b"\x00" + t.encode() for t in text_models()]
    for p in sorted((REPO / "tests/data/text_parser").glob("*.txt")):
        out.append(b"\x00" + p.read_bytes())
    for m in models:
        if len(m) > 64 * 1024:
            continue
        try:
            out.append(b"\x00" + printer.to_text(ol.load_model(m)).encode())
        except Exception:  # noqa: BLE001 - not printable: only the binary seed
            pass
        out.append(b"\x04" + m)
    out.append(b"\x01" + b"g (float[2] x) => (float[2] y) { y = Relu(x) }")
    out.append(b"\x02" + b'<domain: "f", opset_import: ["" : 18]> F <a> (x) => (y) { y = Relu(x) }')
    out.append(b"\x03" + b"y = Add<alpha: float = 1.0>(x, x)")
    return out


def dense_page(ol, capacity: int, width: int, dtype: str = "raw"):
    t = ol.TensorProto()
    t.dims.extend([1, 1, capacity, width])
    values = np.arange(capacity * width, dtype=np.float32)
    if dtype == "raw":
        t.data_type = ol.TensorProto.FLOAT
        t.raw_data = values.tobytes()
    elif dtype == "float_data":
        t.data_type = ol.TensorProto.FLOAT
        t.float_data.extend(values.tolist())
    else:  # float16 in int32_data
        t.data_type = ol.TensorProto.FLOAT16
        t.int32_data.extend(values.astype(np.float16).view(np.uint16).tolist())
    return t


def affine(ol, dims: list[int], storage: int, nbytes: int, scale_dims=(), axis=None, block=0):
    e = ol.EncodedValueProto()
    e.logical_type.tensor_type.elem_type = ol.TensorProto.FLOAT
    for d in dims:
        e.logical_type.tensor_type.shape.dim.add().dim_value = d
    if storage:
        e.affine.storage_type = storage
    e.affine.scale.data_type = ol.TensorProto.FLOAT
    e.affine.scale.dims.extend(scale_dims)
    e.affine.scale.float_data.extend([0.5] * int(np.prod(scale_dims or [1])))
    if axis is not None:
        e.affine.axis = axis
    if block:
        e.affine.block_size = block
    e.raw_data = b"\x01" * nbytes
    return e


def paged_corpus() -> list[bytes]:
    import onnx_light.onnx as ol

    out = [ol.PagedCacheProto().SerializeToString()]
    for kind in ("raw", "float_data", "fp16"):
        c = ol.PagedCacheProto(name="cache")
        start = 0
        for length in (3, 4, 1):
            b = c.blocks.add()
            b.start, b.length = start, length
            b.key.CopyFrom(dense_page(ol, 4, 2, kind))
            b.value.CopyFrom(dense_page(ol, 4, 3, kind))
            start += length
        out.append(c.SerializeToString())
    c = ol.PagedCacheProto()
    b = c.blocks.add()
    b.start, b.length = 0, 2
    b.encoded_key.CopyFrom(affine(ol, [1, 1, 4, 2], ol.TensorProto.INT8, 8))
    b.encoded_value.CopyFrom(affine(ol, [1, 1, 4, 2], ol.TensorProto.UINT4, 4, [1, 1, 4, 1], 2, 0))
    out.append(c.SerializeToString())
    return out


def type_proto(ol, text_dims, elem=1, struct_ref=None, seq=False):
    t = ol.TypeProto()
    if struct_ref is not None:
        t.struct_type.type_ref = struct_ref
    else:
        tt = t.tensor_type
        tt.elem_type = elem
        for d in text_dims:
            dim = tt.shape.dim.add()
            if isinstance(d, str):
                dim.dim_param = d
            else:
                dim.dim_value = d
    if seq:
        s = ol.TypeProto()
        s.sequence_type.elem_type.CopyFrom(t)
        return s
    return t


def encoded_corpus() -> list[bytes]:
    import onnx_light.onnx as ol

    def pack(declared, model, encoded) -> bytes:
        a, b = declared.SerializeToString(), model.SerializeToString()
        return struct.pack("<H", len(a)) + a + struct.pack("<H", len(b)) + b + \
            encoded.SerializeToString()

    empty = ol.ModelProto()
    shared = ol.ModelProto()
    p = shared.shared_parameters.add()
    p.name = "s"
    p.storage_type = ol.TensorProto.INT4
    p.scale.data_type = ol.TensorProto.FLOAT
    p.scale.dims.extend([4, 2])
    p.scale.float_data.extend([0.25] * 8)
    p.axis, p.block_size = 1, 4
    st = ol.ModelProto()
    s = st.struct_types.add()
    s.name = "kv"
    f = s.field.add()
    f.name = "k"
    f.type.CopyFrom(type_proto(ol, ["N"]))
    out = [
        pack(type_proto(ol, [2, 4]), empty, affine(ol, [2, 4], ol.TensorProto.INT8, 8)),
        pack(type_proto(ol, ["A", "B"]), empty, affine(ol, [2, 4], 0, 4, [2], 0)),
        pack(type_proto(ol, [4, 8]), empty,
             affine(ol, [4, 8], ol.TensorProto.UINT4, 16, [4, 2], 1, 4)),
        pack(type_proto(ol, [3, 3]), empty, affine(ol, [3, 3], ol.TensorProto.UINT2, 3)),
    ]
    ref = affine(ol, [4, 8], 0, 16)
    ref.affine.CopyFrom(ol.AffineLayoutProto())
    ref.parameter_ref = "s"
    out.append(pack(type_proto(ol, [4, 8]), shared, ref))
    se = ol.EncodedValueProto()
    se.struct_type.type_ref = "kv"
    se.raw_data = b"\x00" * 8
    out.append(pack(type_proto(ol, [], struct_ref="kv"), st, se))
    return out


# ---- state_feeds: the byte format of fuzz_util.h ReadValue --------------------------------

DTYPES = {"float32": 0, "int64": 1, "int32": 2, "float16": 3, "bool": 4, "uint8": 5,
          "float64": 6}


def v_tensor(a: np.ndarray, how: int = 0) -> bytes:
    """how: 0 owned, 1 borrowed view, 2 strided view (element strides, zeros: no data)."""
    out = bytes([how, DTYPES[str(a.dtype)], a.ndim]) + bytes(a.shape)
    if how == 2:
        return out + bytes(s // a.itemsize for s in a.strides)
    return out + a.tobytes()


def v_struct(name: int, fields: list[tuple[int, bytes]]) -> bytes:
    return bytes([3, name, len(fields)]) + b"".join(bytes([f]) + v for f, v in fields)


def v_seq(items: list[bytes]) -> bytes:
    return bytes([4, len(items)]) + b"".join(items)


def v_int64_scalar(x: int) -> bytes:
    return bytes([0, DTYPES["int64"], 0]) + struct.pack("<q", x)


def state_corpus() -> list[bytes]:
    f2 = np.array([1, 2], np.float32)
    out = []
    # model 0: past/present float[2]
    out.append(bytes([0, 0b11111]) + v_tensor(f2) + v_tensor(f2) + v_tensor(f2) + v_tensor(f2))
    out.append(bytes([0, 0]) + v_tensor(f2) + v_tensor(f2, 1) + v_tensor(f2, 2))
    # model 1: a sequence of float[N]
    out.append(bytes([1, 1]) + v_seq([v_tensor(f2), v_tensor(f2)]) + v_tensor(f2) + v_tensor(f2))
    # model 2: struct kv {k: float[N], n: int64 scalar}; field names: 5 = "a"... use the table
    names = {"blocks": 0, "start": 1, "length": 2, "key": 3, "value": 4, "a": 5, "b": 6, "": 7}
    kv = v_struct(7, [(names["a"], v_tensor(f2))])
    out.append(bytes([2, 1]) + kv + v_tensor(f2))
    # model 3: a paged cache {blocks: [{start, length, key, value}]}
    page = np.zeros((1, 1, 4, 2), np.float32)
    block = v_struct(7, [(names["start"], v_int64_scalar(0)), (names["length"], v_int64_scalar(2)),
                         (names["key"], v_tensor(page)), (names["value"], v_tensor(page))])
    cache = v_struct(7, [(names["blocks"], v_seq([block, block]))])
    out.append(bytes([3, 1 | 16]) + cache + v_tensor(f2) + cache)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "corpus")
    ap.add_argument("--models-dir", type=Path, default=REPO / "build" / "models")
    args = ap.parse_args()
    models_dir = args.models_dir if args.models_dir.is_dir() else None
    models = model_corpus(models_dir)
    counts = {
        "model": write(args.out / "model", models),
        "text": write(args.out / "text", text_corpus(models)),
        "paged_cache": write(args.out / "paged_cache", paged_corpus()),
        "encoded": write(args.out / "encoded", encoded_corpus()),
        "state_feeds": write(args.out / "state_feeds", state_corpus()),
    }
    total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(", ".join(f"{k}: {v}" for k, v in counts.items()), f"({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
