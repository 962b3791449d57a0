// Prompt-shaped attention (many queries) in tiles, for the fused ScaledDotProductAttention:
// each task takes one (batch, head, block of query rows) and walks the key blocks with an
// online softmax, scoring a whole tile as one small product (S = Q K^T) and accumulating
// O += P V as another, both on the packed SGEMM micro-kernels (math::SgemmOnThisThread).
// Per row the result is the per-row path's; only the order of the sums differs.
//
// Tiles whose mask entries are all "dead" (-inf, or <= -1e30 as torch's finfo.min causal
// masks write them) are skipped: their weights are exactly 0 beside any row's live key
// (exp of a difference of at least one ulp of 1e30 underflows), so skipping them is exact
// for every row that has a live key. So are tiles whose entries are finite but far enough
// below the first key block's that, with every score within a bound of the query and key
// norms, their weights underflow to exactly 0 too: FLOAT16 models' causal masks (finfo.min
// of FLOAT16, -65504). TiledAttention refuses (returns false, computes nothing) when some
// row has no live key: the caller's per-row path then gives that row its exact value.
#pragma once

#include <cstdint>

namespace onnx_light::ops::fused {

struct AttentionProblem {
  int64_t batch = 0, heads = 0, kv_heads = 0, queries = 0, keys = 0, dk = 0, dv = 0;
  const float* q = nullptr;  // [B, H, S, Dk], dense
  const float* k = nullptr;  // [B, Hkv, T, Dk], element strides below (last dim dense)
  int64_t k_strides[3] = {0, 0, 0};
  const float* v = nullptr;  // [B, Hkv, T, Dv]
  int64_t v_strides[3] = {0, 0, 0};
  const float* mask = nullptr;  // additive, element strides over [B, H, S, T] (0: broadcast)
  int64_t mask_strides[4] = {0, 0, 0, 0};
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores softcap * tanh(scale * q.k / softcap), before the mask
  float* y = nullptr;    // [B, H, S, Dv], dense
};

// Whether the tiled path is worth it for `queries` query rows.
bool PrefersTiles(int64_t queries);

// Computes Y; false (nothing written) when some query row has no live key.
bool TiledAttention(const AttentionProblem& p);

// How many tiles (batch, head, query block, key block) TiledAttention computes for `p`.
int64_t TiledAttentionTiles(const AttentionProblem& p);

}  // namespace onnx_light::ops::fused
