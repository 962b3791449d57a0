"""ONNX protos for onnx-light, without the Python protobuf package.

Every class here is generated at import time from the C++ descriptor of
``proto/onnx_light.proto`` and every object is a view of the C++ message itself: a
``ModelProto`` handed to the runtime is read in place, never serialized. The API is the
part of protobuf's Python API that ONNX code uses (keyword constructors, attributes,
``HasField``, ``ClearField``, ``CopyFrom``, ``SerializeToString``, ``FromString``,
repeated fields with ``add``/``append``/``extend``/``del``, enum constants such as
``TensorProto.FLOAT``).

One behavioural difference from protobuf: removing elements with ``del``, ``remove``,
``pop`` or ``clear`` detaches them as protobuf does, but after ``Clear``, ``CopyFrom`` or
``ParseFromString`` of an enclosing message, an element object taken before raises
``RuntimeError`` when used (or views the element that reused its storage) instead of
remaining a detached copy. A sub-message object (``model.graph``) always views the current
field of its parent.

Exchange with the ``onnx`` package goes through bytes (``from_onnx`` / ``to_onnx``): the two
packages use distinct proto packages so both can live in one process.
"""
from __future__ import annotations

import os
from typing import Any, Union

from onnx_light.onnx_py._onnxpykernels import proto as _proto

Message = _proto.Message
EnumTypeWrapper = _proto.EnumTypeWrapper

AttributeProto = _proto.AttributeProto
ValueInfoProto = _proto.ValueInfoProto
NodeProto = _proto.NodeProto
IntIntListEntryProto = _proto.IntIntListEntryProto
NodeDeviceConfigurationProto = _proto.NodeDeviceConfigurationProto
ShardingSpecProto = _proto.ShardingSpecProto
ShardedDimProto = _proto.ShardedDimProto
SimpleShardedDimProto = _proto.SimpleShardedDimProto
TrainingInfoProto = _proto.TrainingInfoProto
ModelProto = _proto.ModelProto
DeviceConfigurationProto = _proto.DeviceConfigurationProto
StringStringEntryProto = _proto.StringStringEntryProto
TensorAnnotation = _proto.TensorAnnotation
GraphProto = _proto.GraphProto
TensorProto = _proto.TensorProto
SparseTensorProto = _proto.SparseTensorProto
TensorShapeProto = _proto.TensorShapeProto
TypeProto = _proto.TypeProto
OperatorSetIdProto = _proto.OperatorSetIdProto
FunctionProto = _proto.FunctionProto
SequenceProto = _proto.SequenceProto
MapProto = _proto.MapProto
OptionalProto = _proto.OptionalProto
# onnx-light extensions.
PersistentBindingProto = _proto.PersistentBindingProto
StructFieldProto = _proto.StructFieldProto
StructTypeProto = _proto.StructTypeProto
AffineLayoutProto = _proto.AffineLayoutProto
EncodedValueProto = _proto.EncodedValueProto
PagedCacheBlockProto = _proto.PagedCacheBlockProto
PagedCacheProto = _proto.PagedCacheProto

# Top-level enums, as in the onnx package (onnx.IR_VERSION, onnx.STABLE, ...).
Version = _proto.Version
OperatorStatus = _proto.OperatorStatus
for _name in Version.keys() + OperatorStatus.keys():
    globals()[_name] = getattr(_proto, _name)
del _name

_PathOrBytes = Union[str, os.PathLike, bytes, bytearray, memoryview, Any]


def _read(source: _PathOrBytes) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if hasattr(source, "read"):
        return source.read()
    with open(os.fspath(source), "rb") as f:
        return f.read()


def load_model(source: _PathOrBytes) -> ModelProto:
    """Loads a ModelProto from a path, a binary file object or serialized bytes."""
    if isinstance(source, (str, os.PathLike)):
        return _proto.load_model_file(os.fspath(source))
    return _proto.load_model_bytes(_read(source))


def save_model(model: ModelProto, destination: Union[str, os.PathLike, Any]) -> None:
    """Writes `model` in binary protobuf form to a path or a binary file object."""
    model = _as_ours(model, ModelProto)
    if hasattr(destination, "write"):
        destination.write(model.SerializeToString())
        return
    _proto.save_model_file(model, os.fspath(destination))


def _as_ours(message: Any, cls: type) -> Any:
    if isinstance(message, cls):
        return message
    return from_onnx(message)


def from_onnx(message: Any) -> Message:
    """Converts a message of the ``onnx`` package (ModelProto, GraphProto, ...) to ours."""
    if isinstance(message, Message):
        return message
    descriptor = getattr(message, "DESCRIPTOR", None)
    cls = getattr(_proto, getattr(descriptor, "name", ""), None)
    if cls is None or not hasattr(message, "SerializeToString"):
        raise TypeError(f"from_onnx expects a message of the onnx package, got "
                        f"{type(message).__name__}")
    return cls.FromString(message.SerializeToString())


def to_onnx(message: Message) -> Any:
    """Converts one of our messages to the ``onnx`` package's class of the same name.

    Raises ValueError when the message uses onnx-light extensions (persistent bindings,
    paged-cache or encoded initializers, struct types, shared parameters): standard ONNX
    cannot represent them and would silently drop their meaning.
    """
    import onnx  # the exchange partner; imported only when used

    if not isinstance(message, Message):
        raise TypeError(f"to_onnx expects an onnx_light proto message, got "
                        f"{type(message).__name__}")
    # The one native rule of standard exports (core/standard_onnx.h): names every extension.
    _proto.check_no_extensions(message, "to_onnx (standard ONNX)")
    cls = getattr(onnx, type(message).DESCRIPTOR.name)
    return cls.FromString(message.SerializeToString())


def _unpickle(qualname: str, data: bytes) -> Message:
    cls: Any = _proto
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return cls.FromString(data)


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("os", "Any", "Union", "annotations")]
