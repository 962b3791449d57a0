// The runtime configuration of the harnesses that run sessions (model, paged_cache,
// state_feeds).
#pragma once

#include "core/allocator.h"
#include "executor/runtime_context.h"

namespace fuzz {

// Kernel outputs come from an allocator that caches nothing. The default one keeps dead
// blocks for reuse (up to 512 MB): under fuzzing nearly every execution then ended with more
// mallocs than frees, so libFuzzer re-ran it and scanned the heap for leaks (most of the
// state targets' time), turned leak detection off after 1,000 such scans, and the process
// grew to 500 MB of cached blocks. Never destroyed: tensors of static sessions outlive main.
inline onnx_light::core::runtime::HeapAllocator& UncachedAllocator() {
  static auto* allocator = new onnx_light::core::runtime::HeapAllocator(0);
  return *allocator;
}

// The context the state harnesses run in, configured once as a server would. A context per
// input also joins the session's shared plan, but its configuration then outlives the input
// (until the next one joins): again more mallocs than frees in every execution.
// (RuntimeSession's handling of a context per call has a doctest in
// tests/cpp/executor/test_session_cache.cc.)
inline onnx_light::core::runtime::RuntimeContext& SharedContext() {
  static auto* context = [] {
    auto* c = new onnx_light::core::runtime::RuntimeContext();
    c->set_allocator(UncachedAllocator());
    return c;
  }();
  return *context;
}

}  // namespace fuzz
