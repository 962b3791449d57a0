#include <doctest/doctest.h>

#include <map>

#include "core/error.h"
#include "state/sampling.h"

using namespace onnx_light::core::runtime;

namespace {
SamplingOptions Options(float temperature, int64_t top_k = 0, float top_p = 1.0f,
                        float penalty = 1.0f, std::optional<uint64_t> seed = std::nullopt) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  o.repetition_penalty = penalty;
  o.seed = seed;
  return o;
}
}  // namespace

TEST_CASE("temperature 0 is greedy and breaks ties toward the lowest id") {
  Sampler s({});
  const float logits[] = {0.5f, 2.0f, 2.0f, -1.0f};
  CHECK(s.Next(logits, {}) == 1);
}

TEST_CASE("a seed makes sampling repeatable, and different seeds differ") {
  const float logits[] = {1.0f, 1.1f, 0.9f, 1.05f, 0.95f, 1.2f};
  auto draw = [&](uint64_t seed) {
    Sampler s(Options(1.0f, 0, 1.0f, 1.0f, seed));
    std::vector<int64_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.Next(logits, {}));
    return out;
  };
  CHECK(draw(42) == draw(42));
  CHECK(draw(42) != draw(43));
}

TEST_CASE("sampling frequencies follow softmax(logits / temperature)") {
  const float logits[] = {0.0f, std::log(3.0f)};  // probabilities 1/4 and 3/4 at T = 1
  Sampler s(Options(1.0f, 0, 1.0f, 1.0f, 7));
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.Next(logits, {}) == 1;
  CHECK(static_cast<double>(ones) / n == doctest::Approx(0.75).epsilon(0.02));
}

TEST_CASE("top-k and top-p keep only the most likely tokens") {
  const float logits[] = {3.0f, 2.9f, 0.0f, -1.0f, 2.8f};
  Sampler k(Options(5.0f, 2, 1.0f, 1.0f, 1));
  std::map<int64_t, int> seen;
  for (int i = 0; i < 500; ++i) seen[k.Next(logits, {})]++;
  CHECK(seen.size() == 2);
  CHECK(seen.count(0) == 1);
  CHECK(seen.count(1) == 1);
  const float peaked[] = {10.0f, 0.0f, 0.0f, 0.0f};
  Sampler p(Options(1.0f, 0, 0.5f, 1.0f, 1));
  for (int i = 0; i < 200; ++i) CHECK(p.Next(peaked, {}) == 0);
}

TEST_CASE("the repetition penalty discourages tokens already generated") {
  const float logits[] = {2.0f, 1.9f};
  const int64_t history[] = {0};
  Sampler s(Options(0.0f, 0, 1.0f, 1.2f));
  CHECK(s.Next(logits, history) == 1);
  CHECK(s.Next(logits, {}) == 0);
}

TEST_CASE("out-of-range options and NaN logits are rejected with their names") {
  CHECK_THROWS_WITH(Sampler(Options(-1.0f)),
                    doctest::Contains("temperature must be a finite number >= 0"));
  CHECK_THROWS_WITH(Sampler(Options(0.0f, 0, 0.0f)), doctest::Contains("top_p must be in (0, 1]"));
  CHECK_THROWS_WITH(Sampler(Options(0.0f, -2)), doctest::Contains("top_k must be >= 0"));
  Sampler s({});
  const float nan[] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_WITH(s.Next(nan, {}), "the model produced NaN logits");
}
