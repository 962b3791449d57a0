// Model bytes: parse ModelProto, check, print as text (inputs up to 16 KiB), build the plan
// (RuntimeSession with max_tensor_bytes = 64 MB) and run once with zero feeds of the declared
// shapes.
#include <cstddef>
#include <cstdint>

#include "core/checker.h"
#include "core/model_io.h"
#include "core/text_printer.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "fuzz_util.h"
#include "shared_context.h"

using namespace fuzz;

namespace {
// Larger inputs are loaded, checked, planned and run, but not printed (see below).
constexpr size_t kMaxPrintedModelBytes = 16 << 10;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Values built outside a run (feeds, caches) obey the same limit as the runs.
  const ScopedMaxTensorBytes limit(kMaxTensorBytes);
  std::shared_ptr<ModelProto> model;
  Expect([&] {
    model = LoadModelFromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  });
  if (!model) return 0;
  Expect([&] { CheckModel(*model); });
  // Printing is text-target work (its mode 4 prints binary models of any size); here it ran
  // on every mutation of the 90 KB int4 decoder seeds and took three quarters of the
  // harness's time (each initializer element a string). Small models still print here.
  if (size <= kMaxPrintedModelBytes) Expect([&] { (void)PrintModel(*model); });
  Expect([&] {
    RuntimeSessionOptions options;
    options.intra_op_threads = 1;
    options.max_tensor_bytes = kMaxTensorBytes;
    RuntimeSession session(std::shared_ptr<const ModelProto>(model), options);
    RuntimeContext context(KernelContext(23));
    context.set_allocator(UncachedAllocator());
    (void)session.plan(context);
    (void)session.Run(context, ZeroFeeds(model->graph()));
  });
  return 0;
}
