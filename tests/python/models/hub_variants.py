"""The variants the Hub's ONNX repositories ship beside model.onnx, each made from an export by
onnxruntime's own tools (shared by tests/python/test_hub_variants.py and
perf/bench_real_decode.py --quantize):

    fp32      the export as is
    fp16      convert_float_to_float16: every tensor FLOAT16, the caches too  (model_fp16)
    q4        MatMulNBitsQuantizer: int4, block 32, symmetric: MatMulNBits    (model_q4)
    q4f16     fp16, then q4                                                    (model_q4f16)
    bnb4      MatMulBnb4Quantizer: NF4 codes, block 64: MatMulBnb4            (model_bnb4)
    bnb4_fp4  the same with FP4 codes
    dynamic   quantize_dynamic: int8 weights (QInt8 per tensor), DynamicQuantizeLinear and
              MatMulInteger                                                    (model_quantized)
"""
from __future__ import annotations

import logging
import os

KINDS = ("fp32", "fp16", "q4", "q4f16", "bnb4", "bnb4_fp4", "dynamic")


def convert(src: str, kind: str, out: str, external_data: bool = False) -> str:
    """Writes `src` converted to `kind` at `out` (its weights in `out`.data when external_data,
    for files past 2 GB) and returns `out`."""
    if kind not in KINDS:
        raise ValueError(f"unknown variant {kind!r}: one of {', '.join(KINDS)}")
    if kind == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(src, out, weight_type=QuantType.QInt8)
        return out
    import onnx

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    model = onnx.load(src)
    if kind in ("fp16", "q4f16"):
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(model, keep_io_types=False)
    if kind in ("q4", "q4f16"):
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
        quantizer.process()
        model = quantizer.model.model
    if kind.startswith("bnb4"):
        from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

        quant_type = MatMulBnb4Quantizer.FP4 if kind == "bnb4_fp4" else MatMulBnb4Quantizer.NF4
        quantizer = MatMulBnb4Quantizer(model, quant_type, 64)
        quantizer.process()
        model = quantizer.model.model
    if external_data:
        onnx.save(model, out, save_as_external_data=True, location=os.path.basename(out) + ".data")
    else:
        onnx.save(model, out)
    return out
