// The C++ GraphBuilder of docs/foundation.md ("Editing graphs"), run by CTest. Exits non-zero
// when a result differs from the documented one.
#include "core/graph_builder.h"

#include <cstdio>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/text_parser.h"

namespace {

bool Fails(const auto& fn, const std::string& fragment) {
  try {
    fn();
  } catch (const onnx_light::core::Error& e) {
    return std::string(e.what()).find(fragment) != std::string::npos;
  }
  return false;
}

// One dense FLOAT page [1, 1, 4, 2] holding 3 valid tokens.
onnx_light::PagedCacheProto OnePageCache() {
  onnx_light::PagedCacheProto cache;
  auto* block = cache.add_blocks();
  block->set_start(0);
  block->set_length(3);
  for (auto* page : {block->mutable_key(), block->mutable_value()}) {
    page->set_data_type(onnx_light::TensorProto::FLOAT);
    for (int64_t d : {1, 1, 4, 2}) page->add_dims(d);
    page->set_raw_data(std::string(4 * 2 * sizeof(float), '\0'));
  }
  return cache;
}

}  // namespace

int main() {
  onnx_light::ModelProto model = onnx_light::core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "accumulate (float[2] delta, float[2] past) => (float[2] present)\n"
      "{ present = Add(delta, past) }");
  auto* binding = model.mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");

  auto builder = onnx_light::core::GraphBuilder::Import(model);
  builder.RenameInput("past", "history");
  builder.MakePagedCacheInitializer("cache", OnePageCache());
  const onnx_light::ModelProto edited = builder.Export();  // validated again
  const bool ok =
      edited.graph().persistent_bindings(0).input_name() == "history" &&
      edited.graph().paged_cache_initializer(0).name() == "cache" &&
      Fails([&] { builder.ExportStandardOnnx(); }, "graph.persistent_bindings ('history'") &&
      Fails([&] { builder.MakePagedCacheInitializer("cache", OnePageCache()); },
            "already used by paged_cache_initializer");
  std::printf("%s\n", ok ? "graph builder: as documented" : "graph builder: MISMATCH");
  return ok ? 0 : 1;
}
