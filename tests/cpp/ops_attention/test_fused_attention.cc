// ai.onnx_light.fused::ScaledDotProductAttention (the plan's substitute for torch's
// decomposed attention) against a naive reference: repeated KV heads, scaled scores, an
// additive mask, softmax, fully masked rows as zeros; K/V read in place from strided
// (append-capacity) views; layout operands that are not the GQA layout are refused.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Shape4 {
  int64_t b, h, s, d;
};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// y[b, h, i] = softmax_j(cap(q . k[h / group, j] * qs * ks) + mask[b, i, j]) . v; 0 when all
// -inf; cap(x) = softcap * tanh(x / softcap) when softcap > 0, else x.
std::vector<float> Reference(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const std::vector<float>& mask, Shape4 qs,
                             int64_t hkv, int64_t t, float scale, double softcap = 0) {
  const int64_t group = qs.h / hkv;
  std::vector<float> y(static_cast<size_t>(qs.b * qs.h * qs.s * qs.d), 0.0f);
  for (int64_t b = 0; b < qs.b; ++b)
    for (int64_t h = 0; h < qs.h; ++h)
      for (int64_t i = 0; i < qs.s; ++i) {
        std::vector<double> p(static_cast<size_t>(t));
        double max = -kInf;
        for (int64_t j = 0; j < t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < qs.d; ++d)
            s += q[((b * qs.h + h) * qs.s + i) * qs.d + d] *
                 k[((b * hkv + h / group) * t + j) * qs.d + d];
          s *= scale;
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          p[j] = s + (mask.empty() ? 0.0 : mask[(b * qs.s + i) * t + j]);
          max = std::max(max, p[j]);
        }
        if (max == -kInf) continue;
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - max));
        for (int64_t j = 0; j < t; ++j)
          for (int64_t d = 0; d < qs.d; ++d)
            y[((b * qs.h + h) * qs.s + i) * qs.d + d] +=
                static_cast<float>(p[j] / sum) * v[((b * hkv + h / group) * t + j) * qs.d + d];
      }
  return y;
}

// K/V [b, hkv, t, d] held in a buffer with room for `capacity` rows per head (strided).
Tensor CacheView(const std::vector<float>& dense, int64_t b, int64_t hkv, int64_t t, int64_t d,
                 int64_t capacity, std::shared_ptr<std::vector<float>>& store) {
  store = std::make_shared<std::vector<float>>(static_cast<size_t>(b * hkv * capacity * d), 7.0f);
  for (int64_t x = 0; x < b * hkv; ++x)
    std::copy(dense.begin() + x * t * d, dense.begin() + (x + 1) * t * d,
              store->begin() + x * capacity * d);
  return Tensor::StridedView("cache", DataType::kFloat, {b, hkv, t, d},
                             {hkv * capacity * d, capacity * d, d, 1}, store->data(), store);
}

Tensor Ints(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromInt64("shape", {n}, std::move(v));
}

struct Run {
  NodeProto node;
  std::unique_ptr<KernelBase> kernel;
  RuntimeContext context;
  Run(float q_scale, float k_scale, float softcap = 0.0f) {
    node.set_op_type("ScaledDotProductAttention");
    node.set_domain("ai.onnx_light.fused");
    node.set_name("sdpa");
    for (auto [name, value] : {std::pair{"q_scale", q_scale}, std::pair{"k_scale", k_scale},
                               std::pair{"softcap", softcap}}) {
      auto* a = node.add_attribute();
      a->set_name(name);
      a->set_type(AttributeProto::FLOAT);
      a->set_f(value);
    }
    for (int i = 0; i < 10; ++i) node.add_input("in" + std::to_string(i));
    node.add_output("y");
    const auto* factory = BuiltinKernels().Find("ai.onnx_light.fused", node.op_type(), 1);
    REQUIRE(factory != nullptr);
    kernel = (*factory)(node, context, KernelInfo(node, context.kernel_ctx()));
  }
  Tensor operator()(std::vector<const Tensor*> inputs) {
    std::vector<RuntimeValue> values;
    values.reserve(inputs.size());
    std::vector<const RuntimeValue*> in;
    for (const Tensor* t : inputs) {
      if (t == nullptr) {
        in.push_back(nullptr);
        continue;
      }
      values.emplace_back(*t);
      in.push_back(&values.back());
    }
    RuntimeValue out;
    RuntimeValue* outs[] = {&out};
    KernelCall call(&context, node, in, outs);
    kernel->Compute(call);
    return out.tensor();
  }
};

void CheckClose(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= tol);
}

}  // namespace

TEST_CASE("fused attention equals the decomposed computation for grouped heads and masks") {
  for (int64_t s : {1, 5})
    for (int64_t t : {7, 300})  // small: each row is one task on the calling thread
      for (bool with_mask : {false, true}) {
        CAPTURE(s);
        CAPTURE(t);
        CAPTURE(with_mask);
        const Shape4 qs{2, 6, s, 16};
        const int64_t hkv = 2, rep = 3;
        const auto q = Random(static_cast<size_t>(qs.b * qs.h * s * qs.d), 1);
        const auto k = Random(static_cast<size_t>(qs.b * hkv * t * qs.d), 2);
        const auto v = Random(static_cast<size_t>(qs.b * hkv * t * qs.d), 3);
        // Causal over the last s positions; batch 1's first query sees nothing (zeros).
        std::vector<float> mask;
        if (with_mask) {
          mask.assign(static_cast<size_t>(qs.b * s * t), 0.0f);
          for (int64_t b = 0; b < qs.b; ++b)
            for (int64_t i = 0; i < s; ++i)
              for (int64_t j = 0; j < t; ++j)
                if (j > t - s + i || (b == 1 && i == 0)) mask[(b * s + i) * t + j] = -kInf;
        }
        std::shared_ptr<std::vector<float>> k_store, v_store;
        const Tensor qt = Tensor::FromFloat("q", {qs.b, qs.h, s, qs.d}, q);
        const Tensor kt = CacheView(k, qs.b, hkv, t, qs.d, t + 9, k_store);
        const Tensor vt = CacheView(v, qs.b, hkv, t, qs.d, t + 9, v_store);
        const Tensor mt = Tensor::FromFloat("m", {qs.b, 1, s, t}, mask);
        const Tensor ek = Ints({qs.b, hkv, rep, t, qs.d}), rk = Ints({qs.b, qs.h, t, qs.d});
        const Tensor ev = Ints({qs.b, hkv, rep, t, qs.d}), rv = Ints({0, -1, t, qs.d});
        Run run(0.5f, 0.25f);
        const Tensor y =
            run({&qt, &kt, &vt, with_mask ? &mt : nullptr, &ek, &rk, nullptr, nullptr, &ev, &rv});
        CHECK(y.shape() == Shape{qs.b, qs.h, s, qs.d});
        CheckClose(y.ToFloatVector(), Reference(q, k, v, mask, qs, hkv, t, 0.125f), 2e-5f);
        if (with_mask) {  // the fully masked row of batch 1, query 0: zeros in every head
          const auto yv = y.ToFloatVector();
          for (int64_t h = 0; h < qs.h; ++h)
            for (int64_t d = 0; d < qs.d; ++d) CHECK(yv[((qs.h + h) * s) * qs.d + d] == 0.0f);
        }
      }
}

TEST_CASE("a per-head mask that kills some heads' key blocks and not others' decodes exactly") {
  // One query, 4 heads over 2 KV heads, 200 keys in blocks of 64 read in place from a cache
  // with spare capacity: head 0 sees no key of the first block, head 2 none of the second,
  // head 3 only the first 10 keys, head 1 every key. Blocks where some heads of a group are
  // live and others not take the per-head value sums.
  const int64_t hkv = 2, t = 200, rep = 2;
  const auto q = Random(static_cast<size_t>(4 * 64), 21);
  const auto k = Random(static_cast<size_t>(hkv * t * 64), 22);
  const auto v = Random(static_cast<size_t>(hkv * t * 64), 23);
  std::vector<float> mask(static_cast<size_t>(4 * t), 0.0f);
  for (int64_t j = 0; j < t; ++j) {
    if (j < 64) mask[0 * t + j] = -kInf;
    if (j >= 64 && j < 128) mask[2 * t + j] = -kInf;
    if (j >= 10) mask[3 * t + j] = -kInf;
  }
  std::shared_ptr<std::vector<float>> k_store, v_store;
  const Tensor qt = Tensor::FromFloat("q", {1, 4, 1, 64}, q);
  const Tensor kt = CacheView(k, 1, hkv, t, 64, t + 9, k_store);
  const Tensor vt = CacheView(v, 1, hkv, t, 64, t + 9, v_store);
  const Tensor mt = Tensor::FromFloat("m", {1, 4, 1, t}, mask);
  const Tensor ek = Ints({1, hkv, rep, t, 64}), rk = Ints({1, 4, t, 64});
  const Tensor ev = Ints({1, hkv, rep, t, 64}), rv = Ints({0, -1, t, 64});
  Run run(0.5f, 0.25f);
  const Tensor y = run({&qt, &kt, &vt, &mt, &ek, &rk, nullptr, nullptr, &ev, &rv});
  REQUIRE(y.shape() == Shape{1, 4, 1, 64});
  const auto got = y.ToFloatVector();
  for (int64_t h = 0; h < 4; ++h) {  // each head against the reference with its own mask row
    const int64_t kh = h / rep;
    const std::vector<float> qh(q.begin() + h * 64, q.begin() + (h + 1) * 64);
    const std::vector<float> kk(k.begin() + kh * t * 64, k.begin() + (kh + 1) * t * 64);
    const std::vector<float> vv(v.begin() + kh * t * 64, v.begin() + (kh + 1) * t * 64);
    const std::vector<float> mh(mask.begin() + h * t, mask.begin() + (h + 1) * t);
    const auto want = Reference(qh, kk, vv, mh, Shape4{1, 1, 1, 64}, 1, t, 0.125f);
    CheckClose(std::vector<float>(got.begin() + h * 64, got.begin() + (h + 1) * 64), want, 2e-5f);
  }
}

TEST_CASE("a long decode row is split over tasks and merged by log-sum-exp to the reference") {
  // One query row (1 batch, 1 KV head, 4 query heads) over 3000 keys: 1.5M multiply-adds, so
  // the keys are cut into chunks whose partial softmax states are merged.
  const Shape4 qs{1, 4, 1, 64};
  const int64_t hkv = 1, t = 3000;
  const auto q = Random(static_cast<size_t>(4 * 64), 11);
  const auto k = Random(static_cast<size_t>(t * 64), 12);
  const auto v = Random(static_cast<size_t>(t * 64), 13);
  std::shared_ptr<std::vector<float>> k_store, v_store;
  const Tensor qt = Tensor::FromFloat("q", {1, 4, 1, 64}, q);
  const Tensor kt = CacheView(k, 1, hkv, t, 64, t + 5, k_store);
  const Tensor vt = CacheView(v, 1, hkv, t, 64, t + 5, v_store);
  const Tensor ek = Ints({1, hkv, 4, t, 64}), rk = Ints({1, 4, t, 64});
  const Tensor ev = Ints({1, hkv, 4, t, 64}), rv = Ints({1, 4, t, 64});
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    tbb::task_arena arena(threads);
    Tensor y;
    arena.execute([&] {
      Run run(1.0f, 0.125f);
      y = run({&qt, &kt, &vt, nullptr, &ek, &rk, nullptr, nullptr, &ev, &rv});
    });
    CheckClose(y.ToFloatVector(), Reference(q, k, v, {}, qs, hkv, t, 0.125f), 2e-5f);
  }
}

TEST_CASE("fused attention refuses layout operands that are not the grouped-query layout") {
  const Shape4 qs{1, 4, 1, 8};
  const int64_t hkv = 2, t = 3;
  const Tensor q = Tensor::FromFloat("q", {1, 4, 1, 8}, Random(32, 4));
  const Tensor k = Tensor::FromFloat("k", {1, 2, 3, 8}, Random(48, 5));
  const Tensor v = Tensor::FromFloat("v", {1, 2, 3, 8}, Random(48, 6));
  const Tensor ek = Ints({1, hkv, 2, t, 8});
  // Heads merged in the wrong order would be [1, t, 4, 8]: not what the kernel computes.
  const Tensor wrong = Ints({1, t, qs.h, 8});
  Run run(1.0f, 1.0f);
  CHECK_THROWS_WITH_AS(run({&q, &k, &v, nullptr, &ek, &wrong, nullptr, nullptr, &ek, &wrong}),
                       doctest::Contains("grouped-query attention needs [1, 4, 3, 8]"),
                       core::Error);
  // K with fewer heads than Q and no repeat at all is refused too.
  CHECK_THROWS_WITH_AS(run({&q, &k, &v}), doctest::Contains("not repeated"), core::Error);
}

TEST_CASE("prompt-shaped fused attention (the tiled path) equals the decomposed computation") {
  // Causal masks written with -inf and with finfo.min (as torch exports them), none, and a
  // finfo.min mask with a fully masked row (the tiled path declines: per-row semantics, a
  // uniform average over the equal scores).
  const float kMin = -3.4028234663852886e38f;
  enum Mask { kNone, kCausalInf, kCausalMin, kDeadRow };
  for (int64_t s : {16, 70, 130})
    for (int64_t past : {0, 37})
      for (Mask kind : {kNone, kCausalInf, kCausalMin, kDeadRow}) {
        const int64_t t = s + past;
        CAPTURE(s);
        CAPTURE(past);
        CAPTURE(static_cast<int>(kind));
        const Shape4 qs{2, 6, s, 16};
        const int64_t hkv = 2, rep = 3;
        const auto q = Random(static_cast<size_t>(qs.b * qs.h * s * qs.d), 4);
        const auto k = Random(static_cast<size_t>(qs.b * hkv * t * qs.d), 5);
        const auto v = Random(static_cast<size_t>(qs.b * hkv * t * qs.d), 6);
        std::vector<float> mask;
        if (kind != kNone) {
          mask.assign(static_cast<size_t>(qs.b * s * t), 0.0f);
          const float dead = kind == kCausalInf ? -kInf : kMin;
          for (int64_t b = 0; b < qs.b; ++b)
            for (int64_t i = 0; i < s; ++i)
              for (int64_t j = 0; j < t; ++j)
                if (j > past + i || (kind == kDeadRow && b == 1 && i == 3))
                  mask[(b * s + i) * t + j] = dead;
        }
        std::shared_ptr<std::vector<float>> k_store, v_store;
        const Tensor qt = Tensor::FromFloat("q", {qs.b, qs.h, s, qs.d}, q);
        const Tensor kt = CacheView(k, qs.b, hkv, t, qs.d, t + 9, k_store);
        const Tensor vt = CacheView(v, qs.b, hkv, t, qs.d, t + 9, v_store);
        const Tensor mt = Tensor::FromFloat("m", {qs.b, 1, s, t}, mask);
        const Tensor ek = Ints({qs.b, hkv, rep, t, qs.d}), rk = Ints({qs.b, qs.h, t, qs.d});
        const Tensor ev = Ints({qs.b, hkv, rep, t, qs.d}), rv = Ints({0, -1, t, qs.d});
        Run run(0.5f, 0.25f);
        const Tensor y = run(
            {&qt, &kt, &vt, kind != kNone ? &mt : nullptr, &ek, &rk, nullptr, nullptr, &ev, &rv});
        CHECK(y.shape() == Shape{qs.b, qs.h, s, qs.d});
        CheckClose(y.ToFloatVector(), Reference(q, k, v, mask, qs, hkv, t, 0.125f), 2e-5f);
      }
}

TEST_CASE("a soft cap (Gemma 2) caps the scaled scores before the mask, on every path") {
  // Scores of about +-4 against a cap of 1.5: tanh is far from linear there. One query (split
  // over tasks at 300 keys), a short prompt (per-row path) and a long one (tiled path).
  for (int64_t s : {1, 5, 70})
    for (int64_t past : {0, 230}) {
      const int64_t t = s + past;
      CAPTURE(s);
      CAPTURE(past);
      const Shape4 qs{1, 4, s, 16};
      const int64_t hkv = 2, rep = 2;
      const auto q = Random(static_cast<size_t>(qs.h * s * qs.d), 7);
      const auto k = Random(static_cast<size_t>(hkv * t * qs.d), 8);
      const auto v = Random(static_cast<size_t>(hkv * t * qs.d), 9);
      std::vector<float> mask(static_cast<size_t>(s * t), 0.0f);
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = past + i + 1; j < t; ++j) mask[i * t + j] = -kInf;
      std::shared_ptr<std::vector<float>> k_store, v_store;
      const Tensor qt = Tensor::FromFloat("q", {1, qs.h, s, qs.d}, q);
      const Tensor kt = CacheView(k, 1, hkv, t, qs.d, t + 3, k_store);
      const Tensor vt = CacheView(v, 1, hkv, t, qs.d, t + 3, v_store);
      const Tensor mt = Tensor::FromFloat("m", {1, 1, s, t}, mask);
      const Tensor ek = Ints({1, hkv, rep, t, qs.d}), rk = Ints({1, qs.h, t, qs.d});
      Run run(1.0f, 1.0f, 1.5f);
      const Tensor y = run({&qt, &kt, &vt, &mt, &ek, &rk, nullptr, nullptr, &ek, &rk});
      const auto want = Reference(q, k, v, mask, qs, hkv, t, 1.0f, 1.5);
      CheckClose(y.ToFloatVector(), want, 2e-5f);
      if (t == 1) continue;  // one key: its weight is 1 whatever the score
      // Without the cap the result is another one: the test sees the cap.
      const auto uncapped = Reference(q, k, v, mask, qs, hkv, t, 1.0f);
      float far = 0;
      for (size_t i = 0; i < want.size(); ++i) far = std::max(far, std::abs(want[i] - uncapped[i]));
      CHECK(far > 0.05f);
    }
}

TEST_CASE("a negative soft cap is refused when the kernel is built, naming the node") {
  CHECK_THROWS_WITH_AS(Run(1.0f, 1.0f, -2.0f),
                       doctest::Contains("ScaledDotProductAttention node 'sdpa': softcap must be "
                                         ">= 0, got -2"),
                       core::Error);
}

namespace {

// 16-bit copies of float values: the rounded values (what the tensor holds) and the bits.
std::vector<float> Rounded(DataType dt, std::vector<float> v) {
  for (auto& x : v)
    x = dt == DataType::kFloat16 ? core::HalfToFloat(core::FloatToHalf(x))
                                 : core::BFloat16ToFloat(core::FloatToBFloat16(x));
  return v;
}
std::vector<uint16_t> Bits16(DataType dt, const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    bits[i] = dt == DataType::kFloat16 ? core::FloatToHalf(v[i]) : core::FloatToBFloat16(v[i]);
  return bits;
}

// K/V [b, hkv, t, d] of 16-bit type `dt` with room for `capacity` rows per head (strided when
// capacity > t: then rows of a head still lie back to back).
Tensor Cache16(DataType dt, const std::vector<float>& dense, int64_t b, int64_t hkv, int64_t t,
               int64_t d, int64_t capacity, std::shared_ptr<std::vector<uint16_t>>& store) {
  const std::vector<uint16_t> bits = Bits16(dt, dense);
  store = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(b * hkv * capacity * d),
                                                  uint16_t{0x7e00});  // NaN past the rows
  for (int64_t x = 0; x < b * hkv; ++x)
    std::copy(bits.begin() + x * t * d, bits.begin() + (x + 1) * t * d,
              store->begin() + x * capacity * d);
  return Tensor::StridedView("cache", dt, {b, hkv, t, d}, {hkv * capacity * d, capacity * d, d, 1},
                             store->data(), store);
}

}  // namespace

TEST_CASE("FLOAT16 and BFLOAT16 attention computes in FLOAT and rounds once, on every path") {
  // Decode reads the 16-bit K/V rows in place; prompts (the tiled path) widen them once; a
  // 16-bit mask; the output is the input's type. Tolerance: the reference on the rounded
  // inputs, then half an ulp of the output type (|y| < 4 here) plus FLOAT error.
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16})
    for (int64_t s : {1, 3, 40})
      for (int64_t t_extra : {0, 150}) {
        const int64_t t = s + t_extra;
        CAPTURE(core::DataTypeName(dt));
        CAPTURE(s);
        CAPTURE(t);
        const Shape4 qs{1, 6, s, 32};
        const int64_t hkv = 2, rep = 3;
        const auto q = Rounded(dt, Random(static_cast<size_t>(qs.h * s * qs.d), 7));
        const auto k = Rounded(dt, Random(static_cast<size_t>(hkv * t * qs.d), 8));
        const auto v = Rounded(dt, Random(static_cast<size_t>(hkv * t * qs.d), 9));
        std::vector<float> mask(static_cast<size_t>(s * t), 0.0f);
        for (int64_t i = 0; i < s; ++i)
          for (int64_t j = t - s + i + 1; j < t; ++j) mask[i * t + j] = -kInf;  // causal
        std::shared_ptr<std::vector<uint16_t>> k_store, v_store;
        const Tensor qt = Tensor::FromVector("q", dt, {qs.b, qs.h, s, qs.d}, Bits16(dt, q));
        const Tensor kt = Cache16(dt, k, qs.b, hkv, t, qs.d, t + 5, k_store);
        const Tensor vt = Cache16(dt, v, qs.b, hkv, t, qs.d, t + 5, v_store);
        const Tensor mt = Tensor::FromVector("m", dt, {qs.b, 1, s, t}, Bits16(dt, mask));
        const Tensor ek = Ints({qs.b, hkv, rep, t, qs.d}), rk = Ints({qs.b, qs.h, t, qs.d});
        const Tensor ev = Ints({qs.b, hkv, rep, t, qs.d}), rv = Ints({0, -1, t, qs.d});
        Run run(0.5f, 0.25f);
        const Tensor y = run({&qt, &kt, &vt, &mt, &ek, &rk, nullptr, nullptr, &ev, &rv});
        CHECK(y.dtype() == dt);
        CHECK(y.shape() == Shape{qs.b, qs.h, s, qs.d});
        const float tol = dt == DataType::kFloat16 ? 2.0f / 1024 : 2.0f / 128;
        CheckClose(y.ToFloatVector(), Reference(q, k, v, mask, qs, hkv, t, 0.125f), tol);
      }
}

TEST_CASE("fused attention refuses Q, K and V of different types, naming them") {
  std::shared_ptr<std::vector<uint16_t>> store;
  const auto k = Random(2 * 4 * 8, 1);
  const Tensor qt = Tensor::FromFloat("q", {1, 2, 1, 8}, Random(16, 2));
  const Tensor kt = Cache16(DataType::kFloat16, k, 1, 2, 4, 8, 4, store);
  Run run(1.0f, 1.0f);
  CHECK_THROWS_WITH_AS(run({&qt, &kt, &kt}),
                       doctest::Contains("Q, K and V must be 4D FLOAT, got FLOAT16 [1, 2, 4, 8]"),
                       core::Error);
}
