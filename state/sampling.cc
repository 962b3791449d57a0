#include "state/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace onnx_light::core::runtime {

void ValidateSamplingOptions(const SamplingOptions& o) {
  OL_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, ErrorCode::kInvalidArgument,
           "temperature must be a finite number >= 0, got " + std::to_string(o.temperature));
  OL_CHECK(o.top_k >= 0, ErrorCode::kInvalidArgument,
           "top_k must be >= 0, got " + std::to_string(o.top_k));
  OL_CHECK(o.top_p > 0 && o.top_p <= 1, ErrorCode::kInvalidArgument,
           "top_p must be in (0, 1], got " + std::to_string(o.top_p));
  OL_CHECK(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0,
           ErrorCode::kInvalidArgument,
           "repetition_penalty must be > 0, got " + std::to_string(o.repetition_penalty));
}

Sampler::Sampler(SamplingOptions options) : options_(options) {
  ValidateSamplingOptions(options_);
  rng_.seed(options_.seed ? *options_.seed : std::random_device{}());
}

// The first index of the largest logit, in one pass (every decode step of every greedy row).
int64_t Sampler::Greedy(std::span<const float> logits) {
  size_t best = 0;
  bool nan = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    nan |= std::isnan(logits[i]);
    if (logits[i] > logits[best]) best = i;
  }
  OL_CHECK(!nan, ErrorCode::kRuntime, "the model produced NaN logits");
  return static_cast<int64_t>(best);
}

int64_t Sampler::Next(std::span<const float> logits, std::span<const int64_t> history) {
  const size_t n = logits.size();
  OL_CHECK(n > 0, ErrorCode::kInvalidArgument, "empty logits row");
  if (options_.temperature == 0.0f && options_.repetition_penalty == 1.0f) return Greedy(logits);
  scratch_.assign(logits.begin(), logits.end());
  if (options_.repetition_penalty != 1.0f) {
    // CTRL-style: shrink positive logits, amplify negative ones, once per distinct token.
    for (int64_t t : history) {
      if (t < 0 || static_cast<size_t>(t) >= n) continue;
      float& l = scratch_[static_cast<size_t>(t)];
      if (l == logits[static_cast<size_t>(t)])
        l = l > 0 ? l / options_.repetition_penalty : l * options_.repetition_penalty;
    }
  }
  for (float l : scratch_)
    OL_CHECK(!std::isnan(l), ErrorCode::kRuntime, "the model produced NaN logits");
  if (options_.temperature == 0.0f) {
    return static_cast<int64_t>(std::max_element(scratch_.begin(), scratch_.end()) -
                                scratch_.begin());
  }
  // Candidates sorted by logit, cut by top-k, then softmax and the top-p mass.
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  size_t keep = options_.top_k > 0 ? std::min<size_t>(n, static_cast<size_t>(options_.top_k)) : n;
  auto by_logit = [&](int64_t a, int64_t b) {
    const float la = scratch_[static_cast<size_t>(a)], lb = scratch_[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  if (keep < n) {
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep),
                      order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  const float max = scratch_[static_cast<size_t>(order_[0])];
  std::vector<float> probs(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((scratch_[static_cast<size_t>(order_[i])] - max) / options_.temperature);
    total += probs[i];
  }
  if (options_.top_p < 1.0f) {
    double mass = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      mass += probs[i] / total;
      if (mass >= options_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = std::accumulate(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace onnx_light::core::runtime
