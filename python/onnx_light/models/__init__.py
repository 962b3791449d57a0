"""Small models that onnx-light builds itself (no download), for demos, tests and benchmarks."""
from onnx_light.models.tiny_decoder import TinyDecoderConfig, build_tiny_decoder

__all__ = ["TinyDecoderConfig", "build_tiny_decoder"]
