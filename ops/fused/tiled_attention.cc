#include "ops/fused/tiled_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "executor/parallel.h"
#include "ops/math/gemm.h"
#include "ops/math/vector_ops.h"
#include "ops/math/vexp.h"

namespace onnx_light::ops::fused {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kDead = -1e30f;  // a mask entry at or below this is a masked key
// math::VecExp gives exactly 0 from -104 down; the rest is room for the roundings of the
// scores, the mask's addition and the running maximum's subtraction.
constexpr float kUnderflow = -110.0f;
constexpr int64_t kQueryBlock = 64;  // query rows per task
constexpr int64_t kKeyBlock = 64;    // keys per tile
constexpr int64_t kMinQueries = 16;  // fewer query rows: the per-row path

// Which tiles have a live key, per (mask batch, mask head, query block, key block), and
// whether every query row has one. Mask rows are read once, whatever the head count.
class TileLiveness {
 public:
  explicit TileLiveness(const AttentionProblem& p) : p_(p) {
    q_blocks_ = (p.queries + kQueryBlock - 1) / kQueryBlock;
    k_blocks_ = (p.keys + kKeyBlock - 1) / kKeyBlock;
    mb_ = p.mask == nullptr || p.mask_strides[0] == 0 ? 1 : p.batch;
    mh_ = p.mask == nullptr || p.mask_strides[1] == 0 ? 1 : p.heads;
    live_.assign(static_cast<size_t>(mb_ * mh_ * q_blocks_ * k_blocks_), p.mask == nullptr);
    if (p.mask != nullptr) {
      Scan();
      SkipUnderflowing();
    }
  }
  bool every_row_live() const { return every_row_live_; }
  bool live(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
    return live_[Index(mb_ == 1 ? 0 : b, mh_ == 1 ? 0 : h, qb, kb)];
  }

 private:
  size_t Index(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
    return static_cast<size_t>(((b * mh_ + h) * q_blocks_ + qb) * k_blocks_ + kb);
  }
  // Marks the tiles with an entry above kDead, and notes each tile's largest entry (+inf
  // with a NaN) and each query block's smallest row maximum over the first key block. A row
  // stops reading a tile at its first entry above kUnderflow: such a tile is computed anyway,
  // and a smaller maximum for the first block only makes SkipUnderflowing more cautious.
  void Scan() {
    const int64_t* ms = p_.mask_strides;
    tile_max_.assign(live_.size(), kNegInf);
    first_min_.assign(static_cast<size_t>(mb_ * mh_ * q_blocks_), kInf);
    for (int64_t b = 0; b < mb_; ++b)
      for (int64_t h = 0; h < mh_; ++h)
        for (int64_t i = 0; i < p_.queries; ++i) {
          const float* row = p_.mask + b * ms[0] + h * ms[1] + i * ms[2];
          bool row_live = false;
          for (int64_t kb = 0; kb < k_blocks_; ++kb) {
            const int64_t j1 = std::min(p_.keys, (kb + 1) * kKeyBlock);
            float largest = kNegInf;
            for (int64_t j = kb * kKeyBlock; j < j1 && !(largest > kUnderflow); ++j) {
              const float m = row[j * ms[3]];
              largest = m != m ? kInf : std::max(largest, m);
            }
            const size_t at = Index(b, h, i / kQueryBlock, kb);
            if (largest > kDead) live_[at] = true;
            row_live |= largest > kDead;
            tile_max_[at] = std::max(tile_max_[at], largest);
            float& first = first_min_[at / static_cast<size_t>(k_blocks_)];
            if (kb == 0) first = std::min(first, largest == kInf ? kNegInf : largest);
          }
          every_row_live_ &= row_live;
        }
  }

  // Masks whose masked entries are large but finite (FLOAT16 models write finfo.min, -65504)
  // leave every tile above kDead. Such a tile is skipped when its weights are exactly 0 all
  // the same: every row takes the first key block first, so its running maximum is at least
  // -bound + that block's largest mask entry, and each entry here is then at least 104 below
  // it (bound: the largest |score|, by the Cauchy-Schwarz bound of the scaled dots).
  void SkipUnderflowing() {
    bool candidate = false;
    for (size_t at = 0; at < live_.size(); ++at)
      candidate |= live_[at] && tile_max_[at] <= kUnderflow;
    if (!candidate) return;
    const float bound = ScoreBound();
    if (!(bound < -kUnderflow * 1e6f)) return;  // (NaN or infinite values: nothing skipped)
    for (size_t at = 0; at < live_.size(); ++at) {
      const float first = first_min_[at / static_cast<size_t>(k_blocks_)];
      if (live_[at] && at % static_cast<size_t>(k_blocks_) != 0 &&
          tile_max_[at] <= first + kUnderflow - 2.0f * bound)
        live_[at] = false;
    }
  }

  // An upper bound of |score| over the problem: the soft cap, or |scale| * max |q| * max |k|
  // (with room for the roundings of the norms and of the products).
  float ScoreBound() const {
    if (p_.softcap > 0.0f) return p_.softcap;
    float q2 = 0.0f, k2 = 0.0f;
    for (int64_t r = 0; r < p_.batch * p_.heads * p_.queries; ++r) {
      const float* q = p_.q + r * p_.dk;
      q2 = math::NanMax(q2, math::Dot(q, q, p_.dk));
    }
    for (int64_t b = 0; b < p_.batch; ++b)
      for (int64_t h = 0; h < p_.kv_heads; ++h)
        for (int64_t t = 0; t < p_.keys; ++t) {
          const float* k = p_.k + b * p_.k_strides[0] + h * p_.k_strides[1] + t * p_.k_strides[2];
          k2 = math::NanMax(k2, math::Dot(k, k, p_.dk));
        }
    return std::abs(p_.scale) * std::sqrt(q2) * std::sqrt(k2) * 1.001f + 1e-3f;
  }

  const AttentionProblem& p_;
  int64_t q_blocks_ = 0, k_blocks_ = 0, mb_ = 1, mh_ = 1;
  std::vector<char> live_;
  std::vector<float> tile_max_, first_min_;
  bool every_row_live_ = true;
};

// One task: query rows [i0, i0 + mq) of head h of batch b.
class QueryBlock {
 public:
  QueryBlock(const AttentionProblem& p, int64_t b, int64_t h, int64_t i0)
      : p_(p),
        b_(b),
        h_(h),
        i0_(i0),
        mq_(std::min(kQueryBlock, p.queries - i0)),
        scores_(static_cast<size_t>(mq_ * kKeyBlock)),
        out_(static_cast<size_t>(mq_ * p.dv), 0.0f),
        max_(static_cast<size_t>(mq_), kNegInf),
        sum_(static_cast<size_t>(mq_), 0.0f) {}

  void Run(const TileLiveness& live) {
    const int64_t kh = h_ / (p_.heads / p_.kv_heads);
    const float* k = p_.k + b_ * p_.k_strides[0] + kh * p_.k_strides[1];
    const float* v = p_.v + b_ * p_.v_strides[0] + kh * p_.v_strides[1];
    for (int64_t j0 = 0, kb = 0; j0 < p_.keys; j0 += kKeyBlock, ++kb) {
      if (!live.live(b_, h_, i0_ / kQueryBlock, kb)) continue;
      const int64_t nk = std::min(kKeyBlock, p_.keys - j0);
      Score(k + j0 * p_.k_strides[2], nk);
      Softmax(j0, nk);
      Accumulate(v + j0 * p_.v_strides[2], nk);
    }
    Finish();
  }

 private:
  // scores = scale * Q_block K_tile^T (divided by the soft cap, which Softmax applies).
  void Score(const float* k_tile, int64_t nk) {
    math::GemmArgs g;
    g.trans_b = true;
    g.m = mq_;
    g.n = nk;
    g.k = p_.dk;
    g.alpha = p_.softcap > 0.0f ? p_.scale / p_.softcap : p_.scale;
    g.a = p_.q + ((b_ * p_.heads + h_) * p_.queries + i0_) * p_.dk;
    g.lda = p_.dk;
    g.b = k_tile;
    g.ldb = p_.k_strides[2];
    g.c = scores_.data();
    g.ldc = kKeyBlock;
    math::SgemmOnThisThread(g);
  }

  // Caps the scores (softcap * tanh), adds the mask, rescales each row's running state to
  // the new row maximum and turns the scores into weights exp(s - max).
  void Softmax(int64_t j0, int64_t nk) {
    const int64_t* ms = p_.mask_strides;
    for (int64_t r = 0; r < mq_; ++r) {
      float* s = scores_.data() + r * kKeyBlock;
      if (p_.softcap > 0.0f) {
        math::VecTanh(s, s, nk);
        for (int64_t j = 0; j < nk; ++j) s[j] *= p_.softcap;
      }
      if (p_.mask != nullptr) {
        const float* m = p_.mask + b_ * ms[0] + h_ * ms[1] + (i0_ + r) * ms[2] + j0 * ms[3];
        for (int64_t j = 0; j < nk; ++j) s[j] += m[j * ms[3]];
      }
      float tile_max = kNegInf;
      for (int64_t j = 0; j < nk; ++j) tile_max = math::NanMax(tile_max, s[j]);
      float& mx = max_[static_cast<size_t>(r)];
      if (math::MaxMoves(tile_max, mx)) {
        const float factor = mx == kNegInf ? 0.0f : std::exp(mx - tile_max);
        sum_[static_cast<size_t>(r)] *= factor;
        float* o = out_.data() + r * p_.dv;
        for (int64_t d = 0; d < p_.dv; ++d) o[d] *= factor;
        mx = tile_max;
      }
      if (mx == kNegInf) {
        std::fill(s, s + nk, 0.0f);
        continue;
      }
      sum_[static_cast<size_t>(r)] += static_cast<float>(math::VecExpShiftSum(s, mx, s, nk));
    }
  }

  // out += weights V_tile.
  void Accumulate(const float* v_tile, int64_t nk) {
    math::GemmArgs g;
    g.m = mq_;
    g.n = p_.dv;
    g.k = nk;
    g.a = scores_.data();
    g.lda = kKeyBlock;
    g.b = v_tile;
    g.ldb = p_.v_strides[2];
    g.beta = 1.0f;
    g.c = out_.data();
    g.ldc = p_.dv;
    math::SgemmOnThisThread(g);
  }

  void Finish() {
    for (int64_t r = 0; r < mq_; ++r) {
      float* dst = p_.y + ((b_ * p_.heads + h_) * p_.queries + i0_ + r) * p_.dv;
      const float sum = sum_[static_cast<size_t>(r)];
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
      const float* o = out_.data() + r * p_.dv;
      for (int64_t d = 0; d < p_.dv; ++d) dst[d] = o[d] * inv;
    }
  }

  const AttentionProblem& p_;
  int64_t b_, h_, i0_, mq_;
  std::vector<float> scores_, out_, max_, sum_;
};

}  // namespace

bool PrefersTiles(int64_t queries) { return queries >= kMinQueries; }

int64_t TiledAttentionTiles(const AttentionProblem& p) {
  const TileLiveness live(p);
  const int64_t q_blocks = (p.queries + kQueryBlock - 1) / kQueryBlock;
  const int64_t k_blocks = (p.keys + kKeyBlock - 1) / kKeyBlock;
  int64_t tiles = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t qb = 0; qb < q_blocks; ++qb)
        for (int64_t kb = 0; kb < k_blocks; ++kb) tiles += live.live(b, h, qb, kb) ? 1 : 0;
  return tiles;
}

bool TiledAttention(const AttentionProblem& p) {
  const TileLiveness live(p);
  if (!live.every_row_live()) return false;
  const int64_t q_blocks = (p.queries + kQueryBlock - 1) / kQueryBlock;
  core::runtime::ParallelFor(p.batch * p.heads * q_blocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      // The last query blocks first: under a causal mask they have the most live tiles.
      const int64_t qb = q_blocks - 1 - task % q_blocks, h = (task / q_blocks) % p.heads;
      const int64_t b = task / (q_blocks * p.heads);
      QueryBlock(p, b, h, qb * kQueryBlock).Run(live);
    }
  });
  return true;
}

}  // namespace onnx_light::ops::fused
