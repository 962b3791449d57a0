// Attention kernel against a naive reference that materialises the full score matrix
// (the official ONNX backend node tests run through tests/python/test_onnx_conformance.py).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include "executor/kernel_registry.h"
#include "executor/runtime_context.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::DataType;

namespace {

struct Case {
  int64_t batch = 1, hq = 2, hkv = 2, sq = 3, skv = 3, past = 0, dk = 8, dv = 8;
  bool causal = false, three_d = false, softcap = false;
  int mask = 0;  // 0 none, 1 bool [sq, mask_len], 2 float [batch, 1, sq, mask_len]
  int64_t mask_len = -1;
  int64_t qk_mode = -1;  // -1: no qk output
  float scale = 0;       // 0: default
};

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Result {
  std::vector<float> y, present_k, present_v, qk;
};

// Direct transcription of the ONNX reference: concat, full scores, bias, softmax, matmul.
Result Reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& pk,
                 const std::vector<float>& pv, const std::vector<float>& mask) {
  const int64_t total = c.past + c.skv, group = c.hq / c.hkv;
  const float scale = c.scale != 0 ? c.scale : 1.0f / std::sqrt(static_cast<float>(c.dk));
  const float inf = std::numeric_limits<float>::infinity();
  Result r;
  // q/k/v given in 4D layout here ([b, h, s, d]); the 3D test transposes before calling.
  auto K = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return j < c.past ? pk[((b * c.hkv + h) * c.past + j) * c.dk + d]
                      : k[((b * c.hkv + h) * c.skv + (j - c.past)) * c.dk + d];
  };
  auto V = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return j < c.past ? pv[((b * c.hkv + h) * c.past + j) * c.dv + d]
                      : v[((b * c.hkv + h) * c.skv + (j - c.past)) * c.dv + d];
  };
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hkv; ++h)
      for (int64_t j = 0; j < total; ++j) {
        for (int64_t d = 0; d < c.dk; ++d) r.present_k.push_back(K(b, h, j, d));
        for (int64_t d = 0; d < c.dv; ++d) r.present_v.push_back(V(b, h, j, d));
      }
  r.y.assign(static_cast<size_t>(c.batch * c.hq * c.sq * c.dv), 0.f);
  r.qk.assign(static_cast<size_t>(c.batch * c.hq * c.sq * total), 0.f);
  const int64_t mlen = c.mask_len < 0 ? total : c.mask_len;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        std::vector<float> s(static_cast<size_t>(total)), bias(static_cast<size_t>(total), 0.f);
        for (int64_t j = 0; j < total; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < c.dk; ++d)
            dot += q[((b * c.hq + h) * c.sq + i) * c.dk + d] * K(b, h / group, j, d);
          dot *= scale;
          if (c.softcap) dot = 2.0f * std::tanh(dot / 2.0f);
          s[j] = dot;
          if (c.mask == 1) bias[j] = j < mlen && mask[i * mlen + j] != 0 ? 0.f : -inf;
          if (c.mask == 2) bias[j] = j < mlen ? mask[(b * c.sq + i) * mlen + j] : -inf;
          if (c.causal && j > i + c.past) bias[j] = -inf;
        }
        float mx = -inf;
        for (int64_t j = 0; j < total; ++j) mx = std::max(mx, s[j] + bias[j]);
        float sum = 0;
        std::vector<float> p(static_cast<size_t>(total), 0.f);
        if (mx != -inf)
          for (int64_t j = 0; j < total; ++j) sum += (p[j] = std::exp(s[j] + bias[j] - mx));
        for (int64_t j = 0; j < total; ++j) {
          if (sum > 0) p[j] /= sum;
          const size_t at = static_cast<size_t>(((b * c.hq + h) * c.sq + i) * total + j);
          r.qk[at] = c.qk_mode == 3 ? p[j] : c.qk_mode == 2 ? s[j] + bias[j] : s[j];
          for (int64_t d = 0; d < c.dv; ++d)
            r.y[((b * c.hq + h) * c.sq + i) * c.dv + d] += p[j] * V(b, h / group, j, d);
        }
      }
  return r;
}

Tensor To3D(const std::vector<float>& x, int64_t b, int64_t h, int64_t s, int64_t d,
            const std::string& name) {
  std::vector<float> out(x.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t si = 0; si < s; ++si)
        for (int64_t di = 0; di < d; ++di)
          out[((bi * s + si) * h + hi) * d + di] = x[((bi * h + hi) * s + si) * d + di];
  return Tensor::FromFloat(name, {b, s, h * d}, std::move(out));
}

Tensor Convert(const Tensor& t, DataType type) {
  if (type == DataType::kFloat) return t;
  Tensor out(t.name(), type, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    out.mutable_data<uint16_t>()[i] = type == DataType::kFloat16
                                          ? core::FloatToHalf(t.data<float>()[i])
                                          : core::FloatToBFloat16(t.data<float>()[i]);
  return out;
}

void Run(const Case& c, DataType type = DataType::kFloat, float tol = 2e-5f) {
  std::mt19937 rng(static_cast<unsigned>(c.sq * 131 + c.past * 7 + c.hq + c.mask));
  const int64_t total = c.past + c.skv;
  const auto q = Random(c.batch * c.hq * c.sq * c.dk, rng);
  const auto k = Random(c.batch * c.hkv * c.skv * c.dk, rng);
  const auto v = Random(c.batch * c.hkv * c.skv * c.dv, rng);
  const auto pk = Random(c.batch * c.hkv * c.past * c.dk, rng);
  const auto pv = Random(c.batch * c.hkv * c.past * c.dv, rng);
  const int64_t mlen = c.mask_len < 0 ? total : c.mask_len;
  std::vector<float> mask;
  if (c.mask == 1)
    for (int64_t i = 0; i < c.sq * mlen; ++i) mask.push_back(rng() % 4 != 0 ? 1.f : 0.f);
  if (c.mask == 2) mask = Random(c.batch * c.sq * mlen, rng);
  const Result want = Reference(c, q, k, v, pk, pv, mask);

  NodeProto node;
  node.set_op_type("Attention");
  node.set_name("attn");
  for (const char* n : {"Q", "K", "V", "mask", "past_key", "past_value"}) node.add_input(n);
  for (const char* n : {"Y", "present_key", "present_value", "qk"}) node.add_output(n);
  auto attr_i = [&](const char* name, int64_t value) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(value);
  };
  auto attr_f = [&](const char* name, float value) {
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::FLOAT);
    a->set_f(value);
  };
  if (c.causal) attr_i("is_causal", 1);
  if (c.softcap) attr_f("softcap", 2.0f);
  if (c.scale != 0) attr_f("scale", c.scale);
  if (c.qk_mode >= 0) attr_i("qk_matmul_output_mode", c.qk_mode);
  if (c.three_d) {
    attr_i("q_num_heads", c.hq);
    attr_i("kv_num_heads", c.hkv);
  }
  RuntimeContext ctx;
  auto kernel =
      (*BuiltinKernels().Find("", "Attention", 23))(node, ctx, KernelInfo(node, ctx.kernel_ctx()));

  RuntimeValue in[6], out[4];
  in[0] = RuntimeValue(Convert(c.three_d ? To3D(q, c.batch, c.hq, c.sq, c.dk, "Q")
                                         : Tensor::FromFloat("Q", {c.batch, c.hq, c.sq, c.dk}, q),
                               type));
  in[1] = RuntimeValue(Convert(c.three_d ? To3D(k, c.batch, c.hkv, c.skv, c.dk, "K")
                                         : Tensor::FromFloat("K", {c.batch, c.hkv, c.skv, c.dk}, k),
                               type));
  in[2] = RuntimeValue(Convert(c.three_d ? To3D(v, c.batch, c.hkv, c.skv, c.dv, "V")
                                         : Tensor::FromFloat("V", {c.batch, c.hkv, c.skv, c.dv}, v),
                               type));
  if (c.mask == 1) {
    std::vector<bool> bits;
    for (float m : mask) bits.push_back(m != 0);
    in[3] = RuntimeValue(Tensor::FromBool("mask", {c.sq, mlen}, bits));
  }
  if (c.mask == 2) in[3] = RuntimeValue(Tensor::FromFloat("mask", {c.batch, 1, c.sq, mlen}, mask));
  in[4] = RuntimeValue(
      Convert(Tensor::FromFloat("past_key", {c.batch, c.hkv, c.past, c.dk}, pk), type));
  in[5] = RuntimeValue(
      Convert(Tensor::FromFloat("past_value", {c.batch, c.hkv, c.past, c.dv}, pv), type));
  const RuntimeValue* inputs[6] = {&in[0],
                                   &in[1],
                                   &in[2],
                                   c.mask ? &in[3] : nullptr,
                                   c.past > 0 ? &in[4] : nullptr,
                                   c.past > 0 ? &in[5] : nullptr};
  RuntimeValue* outputs[4] = {&out[0], &out[1], &out[2], c.qk_mode >= 0 ? &out[3] : nullptr};
  KernelCall call(&ctx, node, inputs, outputs);
  kernel->Compute(call);

  std::vector<float> y = out[0].tensor().ToFloatVector();
  if (c.three_d) {  // back to [b, h, s, d]
    std::vector<float> y4(y.size());
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t s = 0; s < c.sq; ++s)
          for (int64_t d = 0; d < c.dv; ++d)
            y4[((b * c.hq + h) * c.sq + s) * c.dv + d] = y[((b * c.sq + s) * c.hq + h) * c.dv + d];
    y = y4;
  }
  REQUIRE(y.size() == want.y.size());
  for (size_t i = 0; i < y.size(); ++i)
    CHECK(y[i] == doctest::Approx(want.y[i]).epsilon(tol).scale(1));
  const auto pk_out = out[1].tensor().ToFloatVector();
  const auto pv_out = out[2].tensor().ToFloatVector();
  CHECK(out[1].tensor().shape() == Shape{c.batch, c.hkv, total, c.dk});
  CHECK(out[1].tensor().dtype() == type);
  for (size_t i = 0; i < pk_out.size(); ++i)
    CHECK(pk_out[i] == doctest::Approx(want.present_k[i]).epsilon(tol).scale(1));
  for (size_t i = 0; i < pv_out.size(); ++i)
    CHECK(pv_out[i] == doctest::Approx(want.present_v[i]).epsilon(tol).scale(1));
  if (c.qk_mode >= 0) {
    const auto qk = out[3].tensor().ToFloatVector();
    for (size_t i = 0; i < qk.size(); ++i) {
      if (std::isinf(want.qk[i]))
        CHECK(std::isinf(qk[i]));
      else
        CHECK(qk[i] == doctest::Approx(want.qk[i]).epsilon(tol).scale(1));
    }
  }
}

}  // namespace

TEST_CASE("Attention matches the reference on plain 4D self-attention") { Run({}); }

TEST_CASE("Attention with a past cache and causal masking aligns bottom-right") {
  Case c;
  c.past = 5;
  c.causal = true;
  Run(c);
  c.sq = c.skv = 1;  // one decode step sees every past key
  Run(c);
}

TEST_CASE("Attention supports grouped-query and multi-query heads") {
  Case c;
  c.hq = 8;
  c.hkv = 2;
  c.past = 4;
  c.causal = true;
  Run(c);
  c.hkv = 1;
  Run(c);
}

TEST_CASE("Attention accepts 3D inputs with head-count attributes") {
  Case c;
  c.three_d = true;
  c.hq = 4;
  c.hkv = 2;
  c.batch = 2;
  c.dv = 4;
  Run(c);
}

TEST_CASE("Attention applies boolean and float masks, padding a short mask as masked") {
  Case c;
  c.past = 3;
  c.mask = 1;
  Run(c);
  c.mask = 2;
  c.batch = 2;
  Run(c);
  c.mask_len = 4;  // shorter than the 6 keys: the rest is masked
  Run(c);
  c.causal = true;
  Run(c);
}

TEST_CASE("Attention softcap, custom scale and every qk_matmul_output mode") {
  for (int64_t mode = 0; mode <= 3; ++mode) {
    Case c;
    c.softcap = true;
    c.scale = 0.3f;
    c.causal = true;
    c.past = 2;
    c.qk_mode = mode;
    Run(c);
  }
}

TEST_CASE("Attention splits long decode rows across tasks and merges them exactly") {
  Case c;
  c.hq = c.hkv = 1;
  c.sq = c.skv = 1;
  c.past = 3000;
  c.causal = true;
  c.dk = c.dv = 64;
  Run(c, DataType::kFloat, 1e-4f);
}

TEST_CASE("Attention computes FLOAT16 and BFLOAT16 and keeps their cache bits") {
  Case c;
  c.past = 6;
  c.causal = true;
  Run(c, DataType::kFloat16, 3e-2f);
  Run(c, DataType::kBFloat16, 8e-2f);
}

TEST_CASE("Attention rejects mismatched heads, naming the node") {
  NodeProto node;
  node.set_op_type("Attention");
  node.set_name("bad");
  for (const char* n : {"Q", "K", "V"}) node.add_input(n);
  node.add_output("Y");
  RuntimeContext ctx;
  auto kernel =
      (*BuiltinKernels().Find("", "Attention", 23))(node, ctx, KernelInfo(node, ctx.kernel_ctx()));
  RuntimeValue q(Tensor("Q", DataType::kFloat, {1, 3, 2, 4}));
  RuntimeValue k(Tensor("K", DataType::kFloat, {1, 2, 2, 4}));
  RuntimeValue v(Tensor("V", DataType::kFloat, {1, 2, 2, 4}));
  RuntimeValue y;
  const RuntimeValue* inputs[] = {&q, &k, &v};
  RuntimeValue* outputs[] = {&y};
  KernelCall call(&ctx, node, inputs, outputs);
  CHECK_THROWS_WITH(kernel->Compute(call),
                    "Attention node 'bad': query heads (3) must be a multiple of KV heads (2)");
}
