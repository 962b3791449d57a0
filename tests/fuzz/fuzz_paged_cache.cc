// PagedCacheProto bytes -> RuntimeValue::FromPagedCache, validation against a layout-less
// cache declaration, ToPagedCache and back (content must survive), DeepCopy, and the cache as
// the initial value of a persistent state whose step passes it through (Identity).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "fuzz_util.h"
#include "shared_context.h"
#include "state/persistent_value_state.h"
#include "state/value_validation.h"

using namespace fuzz;

namespace {

std::shared_ptr<const ModelProto> StateModel() {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  GraphProto* g = model->mutable_graph();
  g->set_name("paged");
  auto* in = g->add_input();
  in->set_name("cache");
  in->mutable_type()->mutable_struct_type()->set_name("cache");
  auto* out = g->add_output();
  out->set_name("next_cache");
  out->mutable_type()->mutable_struct_type()->set_name("cache");
  auto* node = g->add_node();
  node->set_op_type("Identity");
  node->add_input("cache");
  node->add_output("next_cache");
  auto* b = g->add_persistent_bindings();
  b->set_input_name("cache");
  b->set_output_name("next_cache");
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Values built outside a run (feeds, caches) obey the same limit as the runs.
  const ScopedMaxTensorBytes limit(kStateMaxTensorBytes);
  static const std::shared_ptr<const ModelProto> model = StateModel();
  static const ValueValidator validator(*model);
  static const auto session = [] {
    RuntimeSessionOptions options;
    options.intra_op_threads = 1;
    options.max_tensor_bytes = kStateMaxTensorBytes;
    return std::make_shared<const RuntimeSession>(model, options);
  }();
  auto cache = std::make_shared<PagedCacheProto>();
  if (!cache->ParseFromArray(data, static_cast<int>(size))) return 0;
  RuntimeValue value;
  Expect([&] { value = RuntimeValue::FromPagedCache(cache); });
  if (value.empty()) return 0;
  bool valid = false;
  Expect([&] {
    validator.ValidatePersistent("cache", value, model->graph().input(0).type());
    valid = true;
  });
  Expect([&] {
    auto exported = std::make_shared<PagedCacheProto>(value.ToPagedCache());
    RuntimeValue back = RuntimeValue::FromPagedCache(exported);
    if (!back.ContentEquals(value)) {
      std::fprintf(stderr, "ToPagedCache/FromPagedCache changed the cache's content\n");
      std::abort();
    }
  });
  Expect([&] {
    RuntimeValue copy = value.DeepCopy();
    if (!copy.ContentEquals(value)) {
      std::fprintf(stderr, "DeepCopy changed the cache's content\n");
      std::abort();
    }
  });
  if (!valid) return 0;
  Expect([&] {
    RuntimeValueMap initial;
    initial["cache"] = value;
    PersistentValueState state(session, std::move(initial));
    RuntimeContext& context = SharedContext();
    state.Run(context, {});
    state.Run(context, {});
    if (!state.Values().at("cache").ContentEquals(value)) {
      std::fprintf(stderr, "an Identity step changed the retained cache\n");
      std::abort();
    }
  });
  return 0;
}
