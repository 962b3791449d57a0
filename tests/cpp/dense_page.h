// DensePage: a dense FLOAT paged-cache page [1, 1, capacity, width] in raw_data, filled with
// base + i, for the tests of paged caches (core, state, GraphBuilder).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "onnx_light.pb.h"

namespace test_util {

inline void DensePage(onnx_light::TensorProto* t, int64_t capacity, int64_t width, float base) {
  t->set_data_type(onnx_light::TensorProto::FLOAT);
  for (int64_t d : {int64_t{1}, int64_t{1}, capacity, width}) t->add_dims(d);
  std::string raw(static_cast<size_t>(capacity * width) * sizeof(float), '\0');
  for (int64_t i = 0; i < capacity * width; ++i) {
    const float v = base + static_cast<float>(i);
    std::memcpy(raw.data() + i * 4, &v, 4);
  }
  t->set_raw_data(raw);
}

}  // namespace test_util
