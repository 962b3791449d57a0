// Model bytes: parse ModelProto, check, print as text, build the plan (RuntimeSession with
// max_tensor_bytes = 64 MB) and run once with zero feeds of the declared shapes.
#include <cstddef>
#include <cstdint>

#include "core/checker.h"
#include "core/model_io.h"
#include "core/text_printer.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "fuzz_util.h"

using namespace fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Values built outside a run (feeds, caches) obey the same limit as the runs.
  const ScopedMaxTensorBytes limit(kMaxTensorBytes);
  std::shared_ptr<ModelProto> model;
  Expect([&] {
    model = LoadModelFromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  });
  if (!model) return 0;
  Expect([&] { CheckModel(*model); });
  Expect([&] { (void)PrintModel(*model); });
  Expect([&] {
    RuntimeSessionOptions options;
    options.intra_op_threads = 1;
    options.max_tensor_bytes = kMaxTensorBytes;
    RuntimeSession session(std::shared_ptr<const ModelProto>(model), options);
    RuntimeContext context(KernelContext(23));
    (void)session.plan(context);
    (void)session.Run(context, ZeroFeeds(model->graph()));
  });
  return 0;
}
