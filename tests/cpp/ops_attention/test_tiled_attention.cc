// The tiled prompt attention (ops/fused/tiled_attention.h) called directly: which tiles it
// computes under causal masks written with -inf and with FLOAT16's finfo.min (-65504, what
// FLOAT16 models' masks hold once widened), and that skipping them changes no bit.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/fused/tiled_attention.h"

namespace fused = onnx_light::ops::fused;

namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kQueries = 200, kDim = 16;
constexpr int64_t kBlocks = (kQueries + 63) / 64;  // query and key blocks of 64

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A causal [S, S] mask whose masked entries are `masked`.
std::vector<float> Causal(float masked) {
  std::vector<float> m(static_cast<size_t>(kQueries * kQueries), 0.0f);
  for (int64_t i = 0; i < kQueries; ++i)
    for (int64_t j = i + 1; j < kQueries; ++j) m[static_cast<size_t>(i * kQueries + j)] = masked;
  return m;
}

struct Problem {
  std::vector<float> q, k, v, mask, y;
  fused::AttentionProblem p;

  Problem(float magnitude, float masked)
      : q(Random(kHeads * kQueries * kDim, 1, magnitude)),
        k(Random(kKvHeads * kQueries * kDim, 2, magnitude)),
        v(Random(kKvHeads * kQueries * kDim, 3, 1.0f)),
        mask(Causal(masked)),
        y(static_cast<size_t>(kHeads * kQueries * kDim), -1.0f) {
    p.batch = 1;
    p.heads = kHeads;
    p.kv_heads = kKvHeads;
    p.queries = p.keys = kQueries;
    p.dk = p.dv = kDim;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.k_strides[0] = p.v_strides[0] = kKvHeads * kQueries * kDim;
    p.k_strides[1] = p.v_strides[1] = kQueries * kDim;
    p.k_strides[2] = p.v_strides[2] = kDim;
    p.mask = mask.data();
    p.mask_strides[2] = kQueries;  // [1, 1, S, T]: batch and head broadcast
    p.mask_strides[3] = 1;
    p.scale = 0.25f;
    p.y = y.data();
  }
};

}  // namespace

TEST_CASE("a FLOAT16 causal mask (-65504) skips the masked tiles and gives the -inf mask's bits") {
  Problem inf(1.0f, -std::numeric_limits<float>::infinity());
  Problem half(1.0f, -65504.0f);
  // Causal over 4 x 4 blocks of 64: the 10 tiles on or below the diagonal, per head.
  CHECK(fused::TiledAttentionTiles(inf.p) == kHeads * 10);
  CHECK(fused::TiledAttentionTiles(half.p) == kHeads * 10);
  REQUIRE(fused::TiledAttention(inf.p));
  REQUIRE(fused::TiledAttention(half.p));
  CHECK(std::memcmp(inf.y.data(), half.y.data(), inf.y.size() * sizeof(float)) == 0);
}

TEST_CASE("masked tiles whose scores could outweigh the mask are computed, not skipped") {
  // Components of about 200 (norms near 800): the scores' bound, 0.25 * 800 * 800 and more,
  // lets -65504 fall short of an underflow, so every tile is computed.
  Problem large(200.0f, -65504.0f);
  CHECK(fused::TiledAttentionTiles(large.p) == kHeads * kBlocks * kBlocks);
  // A NaN in K leaves no bound at all: the same.
  Problem nan(1.0f, -65504.0f);
  nan.k[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK(fused::TiledAttentionTiles(nan.p) == kHeads * kBlocks * kBlocks);
  // A mask just inside the bound (every masked entry only 50 below the live ones) neither.
  Problem near(1.0f, -50.0f);
  CHECK(fused::TiledAttentionTiles(near.p) == kHeads * kBlocks * kBlocks);
}
