// Storage for packed constant weights (PackedB): blocks of 1 MiB up to 32 MiB are carved one
// after another out of 2 MiB-aligned 32 MiB slabs mapped fresh and advised for transparent
// huge pages (not counted in the default allocator's live bytes), instead of each getting
// its own allocation. A decoder layer's packs (1.3-7 MB each for SmolLM2-135M) taken alone
// start and end off 2 MiB boundaries, so most of their pages stay 4 KiB: reading a decode
// step's weights then misses the TLB every 4 KiB. In slabs they lie on huge pages, in the
// order their products first ran (perf/README.md, 2026-12-04).
// A slab is freed when the last block carved from it dies; a dead block's bytes are not
// reused before. Smaller and larger blocks come from the default allocator directly.
#pragma once

#include <cstddef>
#include <memory>

namespace onnx_light::ops::math {

// 64-byte aligned, uninitialised storage of `bytes`. Thread safe.
std::shared_ptr<void> AllocateWeightStorage(size_t bytes);

}  // namespace onnx_light::ops::math
