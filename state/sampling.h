// Next-token selection for generation: greedy at temperature 0, otherwise sampling from
// softmax(logits / temperature) restricted by top-k / top-p, with an optional repetition
// penalty. A seeded Sampler is repeatable within this implementation.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace onnx_light::core::runtime {

struct SamplingOptions {
  float temperature = 0.0f;         // 0: greedy (argmax; ties -> lowest id)
  int64_t top_k = 0;                // 0: no limit
  float top_p = 1.0f;               // nucleus mass in (0, 1]
  float repetition_penalty = 1.0f;  // > 1 discourages tokens already in the row
  std::optional<uint64_t> seed;     // unset: nondeterministic
};

class Sampler {
 public:
  explicit Sampler(SamplingOptions options);
  // Chooses the next token from one row of logits; `history` holds the row's tokens so
  // far (for the repetition penalty). `scratch` is reused to avoid per-token allocation.
  int64_t Next(std::span<const float> logits, std::span<const int64_t> history);

 private:
  int64_t Greedy(std::span<const float> logits);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int64_t> order_;
};

// Throws Error(kInvalidArgument) naming the option when out of range.
void ValidateSamplingOptions(const SamplingOptions& options);

}  // namespace onnx_light::core::runtime
