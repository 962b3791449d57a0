// Small builders for the state tests: declared types and encoded values.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "onnx_light.pb.h"

namespace state_test {

using Dim = std::variant<int64_t, std::string>;

inline onnx_light::TypeProto TensorType(int32_t elem, const std::vector<Dim>& dims,
                                        bool with_shape = true) {
  onnx_light::TypeProto t;
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(elem);
  if (with_shape) {
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (std::holds_alternative<int64_t>(d))
        dim->set_dim_value(std::get<int64_t>(d));
      else
        dim->set_dim_param(std::get<std::string>(d));
    }
  }
  return t;
}

inline onnx_light::TypeProto SequenceType(const onnx_light::TypeProto& elem) {
  onnx_light::TypeProto t;
  *t.mutable_sequence_type()->mutable_elem_type() = elem;
  return t;
}

inline onnx_light::TypeProto StructRef(const std::string& name) {
  onnx_light::TypeProto t;
  t.mutable_struct_type()->set_type_ref(name);
  return t;
}

inline onnx_light::StructTypeProto* AddStruct(
    onnx_light::ModelProto& model, const std::string& name,
    const std::vector<std::pair<std::string, onnx_light::TypeProto>>& fields) {
  auto* s = model.add_struct_types();
  s->set_name(name);
  for (const auto& [field_name, type] : fields) {
    auto* f = s->add_field();
    f->set_name(field_name);
    *f->mutable_type() = type;
  }
  return s;
}

// An inline affine encoded tensor: `codes` bytes of `storage` codes, logical FLOAT dims.
inline std::shared_ptr<onnx_light::EncodedValueProto> Affine(const std::vector<int64_t>& dims,
                                                             int32_t storage, size_t bytes,
                                                             std::vector<int64_t> scale_dims = {},
                                                             int64_t axis = -100,
                                                             uint64_t block_size = 0) {
  auto e = std::make_shared<onnx_light::EncodedValueProto>();
  auto* logical = e->mutable_logical_type()->mutable_tensor_type();
  logical->set_elem_type(1);
  for (int64_t d : dims) logical->mutable_shape()->add_dim()->set_dim_value(d);
  auto* affine = e->mutable_affine();
  if (storage != 0) affine->set_storage_type(storage);
  auto* scale = affine->mutable_scale();
  scale->set_data_type(1);
  int64_t n = 1;
  for (int64_t d : scale_dims) {
    scale->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) scale->add_float_data(0.5f);
  if (axis != -100) affine->set_axis(axis);
  if (block_size) affine->set_block_size(block_size);
  e->set_raw_data(std::string(bytes, '\x01'));
  return e;
}

}  // namespace state_test
