// ai.rt::PagedAttention (spec "Optional heterogeneous paged KV", "Kernel implementation"):
// results against dense attention, the spec's statistics fixtures, page sharing by pointer,
// formats, windows, threads and the explicit rejections.
#include <doctest/doctest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "ops/ai_rt/paged_attention.h"
#include "paged_fixtures.h"

using namespace paged_test;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using Formats = PagedAttention::Formats;
using test_util::ExpectError;

namespace {

template <class Fn>
void ExpectErrorWords(Fn&& fn, ErrorCode code, const std::vector<std::string>& words) {
  try {
    fn();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == code, std::string(e.what()));
    for (const auto& w : words)
      CHECK_MESSAGE(std::string(e.what()).find(w) != std::string::npos,
                    "'" << w << "' not in: " << std::string(e.what()));
  }
}

std::unique_ptr<PagedAttention> MakeKernel(const NodeProto& node,
                                           PagedAttention::FormatSelector select = nullptr) {
  KernelContext ctx;
  auto kernel = std::make_unique<PagedAttention>(ctx, std::move(select));
  kernel->set_node(node);
  return kernel;
}

// The value a quantized token is read back as (the test's own formula, not the kernel's).
float Reconstruct(float x, const PagedAttention::Format& f) {
  if (f.storage == TensorProto::FLOAT) return x;
  int32_t lo = 0, hi = 0;
  switch (f.storage) {
    case TensorProto::INT8:
      lo = -128, hi = 127;
      break;
    case TensorProto::UINT8:
      lo = 0, hi = 255;
      break;
    case TensorProto::INT4:
      lo = -8, hi = 7;
      break;
    case TensorProto::UINT4:
      lo = 0, hi = 15;
      break;
    case TensorProto::INT2:
      lo = -2, hi = 1;
      break;
    default:
      lo = 0, hi = 3;
      break;
  }
  const float q = std::clamp(std::nearbyint(x / f.scale) + static_cast<float>(f.zero_point),
                             static_cast<float>(lo), static_cast<float>(hi));
  return (q - static_cast<float>(f.zero_point)) * f.scale;
}

// Drives a kernel call after call and keeps the dense K/V every step must equal.
struct Decoder {
  int64_t batch = 1, heads = 1, kv_heads = 1, dk = 3, dv = 2;
  bool causal = true;
  int64_t window = -1;
  Formats formats{};
  RuntimeValue cache = PagedAttention::EmptyCache();
  std::vector<std::vector<float>> keys, values;              // per (b, kv head): rows as stored
  std::vector<std::vector<float>> exact_keys, exact_values;  // unquantized
  PagedAttention::Result last;
  uint32_t seed = 1;

  void Init() {
    keys.assign(static_cast<size_t>(batch * kv_heads), {});
    values = exact_keys = exact_values = keys;
  }
  // Flattened [B, Hkv, T, D] of the stored (reconstructed) or exact rows.
  static std::vector<float> Flat(const std::vector<std::vector<float>>& rows) {
    std::vector<float> out;
    for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
    return out;
  }
  // One call with `len` new tokens; returns max |Y - reference| (reference on stored rows).
  float Step(const PagedAttention& kernel, int64_t len,
             const std::function<float(int, int64_t)>& value = nullptr,
             float* exact_error = nullptr) {
    auto gen = [&](int which, int64_t i) {
      return value ? value(which, i) : Noise(seed * 3 + static_cast<uint32_t>(which), i);
    };
    const Tensor q = Floats("q", {batch, heads, len, dk}, [&](int64_t i) { return gen(0, i); });
    const Tensor k = Floats("k", {batch, kv_heads, len, dk}, [&](int64_t i) { return gen(1, i); });
    const Tensor v = Floats("v", {batch, kv_heads, len, dv}, [&](int64_t i) { return gen(2, i); });
    ++seed;
    // Current tokens take part as FLOAT; from the next call on, as stored.
    std::vector<std::vector<float>> k_now = keys, v_now = values;
    for (int64_t bh = 0; bh < batch * kv_heads; ++bh)
      for (int64_t r = 0; r < len; ++r) {
        for (int64_t d = 0; d < dk; ++d) {
          const float x = k.data<float>()[(bh * len + r) * dk + d];
          k_now[static_cast<size_t>(bh)].push_back(x);
          keys[static_cast<size_t>(bh)].push_back(Reconstruct(x, formats.key));
          exact_keys[static_cast<size_t>(bh)].push_back(x);
        }
        for (int64_t d = 0; d < dv; ++d) {
          const float x = v.data<float>()[(bh * len + r) * dv + d];
          v_now[static_cast<size_t>(bh)].push_back(x);
          values[static_cast<size_t>(bh)].push_back(Reconstruct(x, formats.value));
          exact_values[static_cast<size_t>(bh)].push_back(x);
        }
      }
    const int64_t total = static_cast<int64_t>(k_now[0].size()) / dk;
    last = kernel.Run(q, k, v, cache);
    cache = last.present;
    const std::vector<float> qv(q.data<float>(), q.data<float>() + q.numel());
    const auto ref = ReferenceAttention(qv, Flat(k_now), Flat(v_now), batch, heads, kv_heads, len,
                                        total, dk, dv, causal, window);
    const auto y = last.y.ToFloatVector();
    REQUIRE(y.size() == ref.size());
    float err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::max(err, std::abs(y[i] - ref[i]));
    if (exact_error != nullptr) {
      // Against unquantized attention over the exact history.
      std::vector<std::vector<float>> ek = exact_keys, ev = exact_values;
      const auto exact = ReferenceAttention(qv, Flat(ek), Flat(ev), batch, heads, kv_heads, len,
                                            total, dk, dv, causal, window);
      *exact_error = 0;
      for (size_t i = 0; i < y.size(); ++i)
        *exact_error = std::max(*exact_error, std::abs(y[i] - exact[i]));
    }
    return err;
  }
};

const RuntimeSequence& Blocks(const RuntimeValue& cache) {
  return cache.field("blocks").elements();
}

const void* PayloadAddress(const RuntimeValue& payload) {
  return payload.is_tensor() ? payload.tensor().raw_data()
                             : static_cast<const void*>(payload.encoded().raw_data().data());
}

}  // namespace

TEST_CASE(
    "Dense FLOAT pages: dense attention's result, 60 append bytes and 16 scratch bytes per "
    "call, earlier pages shared by pointer") {
  auto kernel = MakeKernel(PagedNode());
  Decoder dec;
  dec.Init();
  std::vector<const void*> page_keys;
  for (int call = 0; call < 6; ++call) {
    CHECK(dec.Step(*kernel, 3) < 1e-5f);
    const auto& stats = dec.last.statistics;
    CHECK(stats.copied_bytes == 60);          // 3 tokens * (3 + 2) * 4 bytes
    CHECK(stats.peak_workspace_bytes == 16);  // constant as the cache grows
    CHECK(stats.dequantized_bytes == 0);
    CHECK(stats.validated_pages == 0);  // pages this kernel wrote need no check
    const RuntimeSequence& blocks = Blocks(dec.cache);
    REQUIRE(blocks.size() == static_cast<size_t>(call + 1));
    for (size_t j = 0; j < page_keys.size(); ++j)
      CHECK(PayloadAddress(blocks[j].field("key")) == page_keys[j]);  // no prefix copy
    page_keys.push_back(PayloadAddress(blocks[blocks.size() - 1].field("key")));
    CHECK(blocks[blocks.size() - 1].field("start").tensor().data<int64_t>()[0] == 3 * call);
  }
  // A cache the kernel did not return (new blocks and field lists): every page is checked
  // once, then the present it returns is known again.
  dec.cache = dec.cache.DeepCopy();
  CHECK(dec.Step(*kernel, 3) < 1e-5f);
  CHECK(dec.last.statistics.validated_pages == 6);
  CHECK(dec.Step(*kernel, 3) < 1e-5f);
  CHECK(dec.last.statistics.validated_pages == 0);
}

TEST_CASE(
    "The windowed fixture: six INT8/UINT4 tokens, two more with a left window of one, "
    "writes 7 bytes, decodes 80 FLOAT bytes and uses 24 bytes of scratch") {
  const Formats formats{{TensorProto::INT8, 0.01f, 0}, {TensorProto::UINT4, 0.25f, 8}};
  auto kernel = MakeKernel(PagedNode(/*window=*/1),
                           [&](const Tensor&, const Tensor&, int64_t) { return formats; });
  Decoder dec;
  dec.dk = 2;
  dec.dv = 3;
  dec.window = 1;
  dec.formats = formats;
  dec.Init();
  for (int call = 0; call < 3; ++call) CHECK(dec.Step(*kernel, 2) < 1e-5f);
  std::vector<const void*> before;
  for (size_t j = 0; j < 3; ++j)
    before.push_back(PayloadAddress(Blocks(dec.cache)[j].field("key")));
  CHECK(dec.Step(*kernel, 2) < 1e-5f);
  const auto& stats = dec.last.statistics;
  CHECK(stats.copied_bytes == 7);        // 2 * 2 INT8 codes + 2 * 3 UINT4 codes
  CHECK(stats.dequantized_bytes == 80);  // query 0: tokens 5, 6; query 1: tokens 6, 7
  CHECK(stats.peak_workspace_bytes == 24);
  for (size_t j = 0; j < 3; ++j)
    CHECK(PayloadAddress(Blocks(dec.cache)[j].field("key")) == before[j]);
  const RuntimeValue& added = Blocks(dec.cache)[3].field("value");
  REQUIRE(added.is_encoded());
  CHECK(added.encoded().affine().storage_type() == TensorProto::UINT4);
  CHECK(added.encoded().raw_data().size() == 3);
}

TEST_CASE(
    "Quantized pages agree with dense attention on their reconstructed values within "
    "1e-5 (INT4, UINT4, INT8, UINT8), with GQA, several batches and both paths") {
  const PagedAttention::Format formats[] = {{TensorProto::INT4, 0.25f, 0},
                                            {TensorProto::UINT4, 0.25f, 8},
                                            {TensorProto::INT8, 0.01f, 0},
                                            {TensorProto::UINT8, 0.01f, 128}};
  for (const auto& f : formats)
    for (int64_t head_size : {4, 16}) {
      CAPTURE(f.storage);
      CAPTURE(head_size);
      const Formats both{f, f};
      auto kernel =
          MakeKernel(PagedNode(), [&](const Tensor&, const Tensor&, int64_t) { return both; });
      Decoder dec;
      dec.batch = 2;
      dec.heads = 6;
      dec.kv_heads = 2;
      dec.dk = dec.dv = head_size;
      dec.formats = both;
      dec.Init();
      CHECK(dec.Step(*kernel, 20) < 1e-5f);  // a prompt of two pages
      for (int call = 0; call < 5; ++call) CHECK(dec.Step(*kernel, 1) < 1e-5f);
    }
}

TEST_CASE(
    "The four-step fixture with components +/-(0.173 * step) stays within the spec's "
    "tolerances of unquantized attention") {
  struct Row {
    PagedAttention::Format format;
    float tolerance;
  };
  const Row rows[] = {{{TensorProto::INT8, 0.01f, 0}, 0.01f},
                      {{TensorProto::UINT8, 0.01f, 128}, 0.01f},
                      {{TensorProto::INT4, 0.25f, 0}, 0.15f},
                      {{TensorProto::UINT4, 0.25f, 8}, 0.15f}};
  for (const Row& row : rows) {
    CAPTURE(row.format.storage);
    const Formats both{row.format, row.format};
    auto kernel =
        MakeKernel(PagedNode(), [&](const Tensor&, const Tensor&, int64_t) { return both; });
    Decoder dec;
    dec.dk = dec.dv = 4;
    dec.formats = both;
    dec.Init();
    for (int step = 1; step <= 4; ++step) {
      float exact_error = 0;
      dec.Step(
          *kernel, 1,
          [&](int which, int64_t i) {
            const float sign = ((i + which + step) % 2 == 0) ? 1.0f : -1.0f;
            return sign * 0.173f * static_cast<float>(step);
          },
          &exact_error);
      CHECK(exact_error <= row.tolerance);
    }
  }
}

TEST_CASE(
    "INT2 and UINT2 pages stay within the derived bound: |dY| <= s_v/2 + max|v| * "
    "(exp(2 * |q|_1 * s_k / (2 sqrt(D))) - 1)") {
  for (const PagedAttention::Format f : {PagedAttention::Format{TensorProto::INT2, 0.5f, 0},
                                         PagedAttention::Format{TensorProto::UINT2, 0.5f, 2}}) {
    CAPTURE(f.storage);
    const Formats both{f, f};
    auto kernel =
        MakeKernel(PagedNode(), [&](const Tensor&, const Tensor&, int64_t) { return both; });
    Decoder dec;
    dec.dk = dec.dv = 4;
    dec.formats = both;
    dec.Init();
    for (int step = 1; step <= 4; ++step) {
      float exact_error = 0;
      // |components| <= 0.692 < 0.75: no code saturates at scale 0.5 (range [-1, 0.5] + s/2).
      auto value = [&](int which, int64_t i) {
        const float sign = ((i + which + step) % 2 == 0) ? 1.0f : -1.0f;
        return sign * 0.173f * static_cast<float>(step);
      };
      CHECK(dec.Step(*kernel, 1, value, &exact_error) < 1e-5f);
      const float q_l1 = 4 * 0.173f * static_cast<float>(step), max_v = 0.692f;
      const float delta = q_l1 * f.scale / (2 * std::sqrt(4.0f));
      CHECK(exact_error <= f.scale / 2 + max_v * (std::exp(2 * delta) - 1));
    }
  }
}

TEST_CASE("Results agree across 1, 2 and 4 threads within 1e-6 on a long split cache") {
  std::vector<std::vector<float>> outputs;
  for (int threads : {1, 2, 4}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      auto kernel = MakeKernel(PagedNode());
      Decoder dec;
      dec.heads = 3;
      dec.dk = dec.dv = 32;
      dec.Init();
      CHECK(dec.Step(*kernel, 600) < 1e-5f);
      CHECK(dec.Step(*kernel, 1) < 1e-5f);  // one query over 601 tokens: split across tasks
      outputs.push_back(dec.last.y.ToFloatVector());
    });
  }
  for (size_t t = 1; t < outputs.size(); ++t)
    for (size_t i = 0; i < outputs[0].size(); ++i)
      CHECK(std::abs(outputs[t][i] - outputs[0][i]) < 1e-6f);
}

TEST_CASE(
    "A dense FLOAT cache past 16 MiB (read payload by payload) agrees with dense attention "
    "within 1e-5, and across 1, 2 and 4 threads within 1e-6") {
  // 2 KiB of K/V per token: 8,201 tokens (512 full pages and a partial one of 9 rows in a
  // capacity of 16) plus the current one pass the kernel's 16 MiB payload-order threshold.
  const int64_t kv = 2, heads = 8, width = 128, full = 512, tail = 9;
  const int64_t past_len = full * 16 + tail, total = past_len + 1;
  std::vector<float> k_all(static_cast<size_t>(kv * total * width)), v_all = k_all;
  std::vector<RuntimeValue> blocks;
  for (int64_t pg = 0; pg <= full; ++pg) {
    const int64_t rows = pg < full ? 16 : tail;
    auto page = [&](uint32_t seed, std::vector<float>& all) {
      return RuntimeValue(Floats("p", {1, kv, 16, width}, [&](int64_t e) {
        const int64_t h = e / (16 * width), r = e / width % 16, j = e % width;
        const float x = 0.5f * Noise(seed + static_cast<uint32_t>(pg), e);
        if (r < rows) all[static_cast<size_t>((h * total + pg * 16 + r) * width + j)] = x;
        return x;
      }));
    };
    blocks.push_back(Block(pg * 16, rows, page(100, k_all), page(5000, v_all)));
  }
  const RuntimeValue past = Cache(std::move(blocks));
  const Tensor q = Floats("q", {1, heads, 1, width}, [](int64_t i) { return Noise(1, i); });
  const Tensor k = Floats("k", {1, kv, 1, width}, [](int64_t i) { return Noise(2, i); });
  const Tensor v = Floats("v", {1, kv, 1, width}, [](int64_t i) { return Noise(3, i); });
  for (int64_t h = 0; h < kv; ++h)
    for (int64_t j = 0; j < width; ++j) {
      k_all[static_cast<size_t>((h * total + past_len) * width + j)] =
          k.data<float>()[h * width + j];
      v_all[static_cast<size_t>((h * total + past_len) * width + j)] =
          v.data<float>()[h * width + j];
    }
  const auto ref =
      ReferenceAttention(q.ToFloatVector(), k_all, v_all, 1, heads, kv, 1, total, width, width);
  NodeProto node = PagedNode();
  auto* a = node.add_attribute();
  a->set_name("max_tokens");
  a->set_type(AttributeProto::INT);
  a->set_i(1 << 20);
  std::vector<std::vector<float>> outputs;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    tbb::task_arena arena(threads);
    arena.execute(
        [&] { outputs.push_back(MakeKernel(node)->Run(q, k, v, past).y.ToFloatVector()); });
    REQUIRE(outputs.back().size() == ref.size());
    for (size_t i = 0; i < ref.size(); ++i) CHECK(std::abs(outputs.back()[i] - ref[i]) < 1e-5f);
    for (size_t i = 0; i < ref.size(); ++i)
      CHECK(std::abs(outputs.back()[i] - outputs[0][i]) < 1e-6f);
  }
}

TEST_CASE(
    "Code-domain reads (no decode buffer) agree with dense attention on reconstructed values "
    "within 1e-5: every appended format, odd head sizes, partial last pages, windows, 1 and 2 "
    "threads") {
  const PagedAttention::Format formats[] = {
      {TensorProto::FLOAT, 1.0f, 0},    {TensorProto::INT8, 0.01f, 0},
      {TensorProto::UINT8, 0.01f, 128}, {TensorProto::INT4, 0.25f, 0},
      {TensorProto::UINT4, 0.25f, 8},   {TensorProto::INT2, 0.5f, 0},
      {TensorProto::UINT2, 0.5f, 2}};
  struct Shape {
    int64_t heads, kv_heads, head_size, window;
  };
  // Group 4 at the benchmark's head size; group 3 with odd widths (13: packed rows off a byte
  // boundary, the portable path; 12: a lane tail); a window over pages of a long prompt.
  const Shape shapes[] = {{8, 2, 128, -1}, {6, 2, 13, -1}, {3, 1, 12, 21}, {4, 1, 8, 5}};
  for (int threads : {1, 2})
    for (const Shape& sh : shapes)
      for (const auto& f : formats) {
        CAPTURE(threads);
        CAPTURE(sh.head_size);
        CAPTURE(sh.window);
        CAPTURE(f.storage);
        tbb::task_arena arena(threads);
        arena.execute([&] {
          // Keys and values in different formats (values one format further on).
          const Formats both{f, formats[(&f - formats + 1) % 7]};
          auto kernel = MakeKernel(PagedNode(sh.window),
                                   [&](const Tensor&, const Tensor&, int64_t) { return both; });
          Decoder dec;
          dec.batch = 2;
          dec.heads = sh.heads;
          dec.kv_heads = sh.kv_heads;
          dec.dk = dec.dv = sh.head_size;
          dec.window = sh.window;
          dec.formats = both;
          dec.Init();
          CHECK(dec.Step(*kernel, 37) < 1e-5f);  // pages of 16, 16 and a partial 5
          for (int call = 0; call < 3; ++call) CHECK(dec.Step(*kernel, 1) < 1e-5f);
          CHECK(dec.Step(*kernel, 300) < 1e-5f);  // a long prompt over the cached pages
          CHECK(dec.Step(*kernel, 1) < 1e-5f);    // one query over 341 tokens: split in chunks
        });
      }
}

TEST_CASE(
    "Pages read as stored and pages decoded by their parameters mix in one block: per-width "
    "scales (decoded), per-head scales, UINT4 with a zero point, FLOAT16 and FLOAT (as stored)") {
  const int64_t kv = 2, width = 16, rows = 3;
  const Shape dims{1, kv, rows, width};
  const int64_t n = kv * rows * width;
  std::vector<int32_t> codes(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) codes[static_cast<size_t>(e)] = static_cast<int32_t>(e % 11) - 5;
  auto with_axis = [&](int64_t axis, const std::vector<float>& scales) {
    auto e = std::make_shared<EncodedValueProto>(
        *AffinePage(DataType::kInt8, 1, 0, dims, codes).encoded_ptr());
    auto* a = e->mutable_affine();
    a->set_axis(axis);
    TensorProto s;
    s.set_data_type(TensorProto::FLOAT);
    s.add_dims(static_cast<int64_t>(scales.size()));
    for (float x : scales) s.add_float_data(x);
    *a->mutable_scale() = s;
    a->clear_zero_point();
    return RuntimeValue::Encoded(e);
  };
  std::vector<float> width_scales(static_cast<size_t>(width));
  for (int64_t j = 0; j < width; ++j)
    width_scales[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j + 1);
  const std::vector<float> head_scales = {0.03f, 0.07f};
  std::vector<int32_t> ucodes(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) ucodes[static_cast<size_t>(e)] = static_cast<int32_t>(e * 7 % 16);
  const RuntimeValue uint4 = AffinePage(DataType::kUint4, 0.125f, 8, dims, ucodes);
  std::vector<float> dense(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) dense[static_cast<size_t>(e)] = Noise(4, e);
  std::vector<uint16_t> halves(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) halves[static_cast<size_t>(e)] = FloatToHalf(Noise(8, e));
  Tensor half("h", DataType::kFloat16, dims);
  std::copy(halves.begin(), halves.end(), half.mutable_data<uint16_t>());
  const RuntimeValue payloads[] = {with_axis(3, width_scales), with_axis(1, head_scales), uint4,
                                   RuntimeValue(half),
                                   RuntimeValue(Tensor::FromFloat("f", dims, dense))};
  // The values each payload stands for, by the formulas (element e = (h, r, j)).
  auto value_of = [&](int p, int64_t e) -> float {
    const int64_t h = e / (rows * width), j = e % width;
    switch (p) {
      case 0:
        return static_cast<float>(codes[static_cast<size_t>(e)]) *
               width_scales[static_cast<size_t>(j)];
      case 1:
        return static_cast<float>(codes[static_cast<size_t>(e)]) *
               head_scales[static_cast<size_t>(h)];
      case 2:
        return static_cast<float>(ucodes[static_cast<size_t>(e)] - 8) * 0.125f;
      case 3:
        return HalfToFloat(halves[static_cast<size_t>(e)]);
      default:
        return dense[static_cast<size_t>(e)];
    }
  };
  // Five pages; keys rotate through the payloads, values start one further on.
  std::vector<RuntimeValue> blocks;
  std::vector<float> kk(static_cast<size_t>(kv * 5 * rows * width)), vv = kk;
  for (int pg = 0; pg < 5; ++pg) {
    const int kp = pg, vp = (pg + 1) % 5;
    blocks.push_back(Block(pg * rows, rows, payloads[kp], payloads[vp]));
    for (int64_t h = 0; h < kv; ++h)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < width; ++j) {
          const int64_t e = (h * rows + r) * width + j;
          const size_t at = static_cast<size_t>(((h * 5 * rows) + pg * rows + r) * width + j);
          kk[at] = value_of(kp, e);
          vv[at] = value_of(vp, e);
        }
  }
  const RuntimeValue past = Cache(std::move(blocks));
  const int64_t heads = 4, total = 5 * rows + 1;
  const Tensor q = Floats("q", {1, heads, 1, width}, [](int64_t i) { return Noise(1, i); });
  const Tensor k = Floats("k", {1, kv, 1, width}, [](int64_t i) { return Noise(2, i); });
  const Tensor v = Floats("v", {1, kv, 1, width}, [](int64_t i) { return Noise(3, i); });
  std::vector<float> k_all, v_all;  // [1, kv, total, width]: the pages, then the current token
  for (int64_t h = 0; h < kv; ++h) {
    const auto kb = kk.begin() + h * 5 * rows * width, vb = vv.begin() + h * 5 * rows * width;
    k_all.insert(k_all.end(), kb, kb + 5 * rows * width);
    v_all.insert(v_all.end(), vb, vb + 5 * rows * width);
    for (int64_t j = 0; j < width; ++j) {
      k_all.push_back(k.data<float>()[h * width + j]);
      v_all.push_back(v.data<float>()[h * width + j]);
    }
  }
  auto kernel = MakeKernel(PagedNode());
  const auto r = kernel->Run(q, k, v, past);
  const auto ref =
      ReferenceAttention(q.ToFloatVector(), k_all, v_all, 1, heads, kv, 1, total, width, width);
  const auto y = r.y.ToFloatVector();
  REQUIRE(y.size() == ref.size());
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - ref[i]) < 1e-5f);
  // Visible quantized tokens as FLOAT bytes, once per KV head (shared by its query heads): keys
  // of pages 0-2 and values of pages 4, 0, 1 are affine, 3 rows each.
  CHECK(r.statistics.dequantized_bytes == static_cast<size_t>(kv * (3 + 3) * rows * width * 4));
}

TEST_CASE("A left window reads only the visible tokens, non-causal calls see the new tokens") {
  const Formats int8{{TensorProto::INT8, 0.01f, 0}, {TensorProto::INT8, 0.01f, 0}};
  auto kernel = MakeKernel(PagedNode(/*window=*/5, 1, /*block_size=*/4),
                           [&](const Tensor&, const Tensor&, int64_t) { return int8; });
  Decoder dec;
  dec.dk = dec.dv = 16;
  dec.window = 5;
  dec.formats = int8;
  dec.Init();
  CHECK(dec.Step(*kernel, 40) < 1e-5f);
  CHECK(Blocks(dec.cache).size() == 10);  // block_size 4
  CHECK(dec.Step(*kernel, 1) < 1e-5f);
  // Six visible tokens: five retained (decoded) and the current one (stored INT8).
  CHECK(dec.last.statistics.dequantized_bytes == 6 * (16 + 16) * 4);

  auto bidirectional = MakeKernel(PagedNode(-1, /*causal=*/0));
  Decoder full;
  full.dk = full.dv = 8;
  full.causal = false;
  full.Init();
  CHECK(full.Step(*bidirectional, 5) < 1e-5f);
  CHECK(full.Step(*bidirectional, 3) < 1e-5f);
}

TEST_CASE("FLOAT16 inputs give a FLOAT16 Y, FLOAT16/BFLOAT16 pages are read as FLOAT") {
  auto kernel = MakeKernel(PagedNode());
  const Shape dims{1, 1, 2, 8};
  Tensor k16("k", DataType::kFloat16, dims), v16("v", DataType::kBFloat16, dims);
  for (int64_t i = 0; i < 16; ++i) {
    k16.mutable_data<uint16_t>()[i] = FloatToHalf(Noise(5, i));
    v16.mutable_data<uint16_t>()[i] = FloatToBFloat16(Noise(6, i));
  }
  k16.Seal();
  v16.Seal();
  RuntimeValue past = Cache({Block(0, 2, RuntimeValue(k16), RuntimeValue(v16))});
  Tensor q("q", DataType::kFloat16, {1, 1, 1, 8});
  for (int64_t i = 0; i < 8; ++i) q.mutable_data<uint16_t>()[i] = FloatToHalf(Noise(7, i));
  const Tensor k = Floats("k", {1, 1, 1, 8}, [](int64_t i) { return Noise(8, i); });
  const Tensor v = Floats("v", {1, 1, 1, 8}, [](int64_t i) { return Noise(9, i); });
  auto r = kernel->Run(q, k, v, past);
  CHECK(r.y.dtype() == DataType::kFloat16);
  std::vector<float> kk = k16.ToFloatVector(), vv = v16.ToFloatVector();
  for (float x : k.ToFloatVector()) kk.push_back(x);
  for (float x : v.ToFloatVector()) vv.push_back(x);
  const auto ref = ReferenceAttention(q.ToFloatVector(), kk, vv, 1, 1, 1, 1, 3, 8, 8);
  const auto y = r.y.ToFloatVector();
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - ref[i]) < 2e-3f);  // FLOAT16 Y
}

TEST_CASE("Per-axis, blocked and signed_storage affine pages are decoded by their parameters") {
  // [1, 1, 4, 2] INT8 codes, scale per width column (axis 3) and blocked along capacity.
  const std::vector<int32_t> codes = {10, -20, 30, -40, 50, -60, 70, -80};
  auto per_axis = std::make_shared<EncodedValueProto>(
      *AffinePage(DataType::kInt8, 1, 0, {1, 1, 4, 2}, codes).encoded_ptr());
  {
    auto* a = per_axis->mutable_affine();
    a->set_axis(3);
    TensorProto s;
    s.set_data_type(TensorProto::FLOAT);
    s.add_dims(2);
    s.add_float_data(0.01f);
    s.add_float_data(0.02f);
    *a->mutable_scale() = s;
    a->clear_zero_point();
  }
  auto blocked = std::make_shared<EncodedValueProto>(
      *AffinePage(DataType::kInt8, 1, 0, {1, 1, 4, 2}, codes).encoded_ptr());
  {
    auto* a = blocked->mutable_affine();
    a->set_axis(2);
    a->set_block_size(2);
    TensorProto s;
    s.set_data_type(TensorProto::FLOAT);
    for (int64_t d : {1, 1, 2, 2}) s.add_dims(d);
    for (float x : {0.01f, 0.02f, 0.03f, 0.04f}) s.add_float_data(x);
    *a->mutable_scale() = s;
    a->clear_zero_point();
  }
  const std::vector<float> axis_values = {0.1f, -0.4f, 0.3f, -0.8f, 0.5f, -1.2f, 0.7f, -1.6f};
  const std::vector<float> block_values = {0.1f, -0.4f, 0.3f, -0.8f, 1.5f, -2.4f, 2.1f, -3.2f};
  const RuntimeValue inferred = AffinePage(DataType::kInt8, 0.01f, 0, {1, 1, 4, 2}, codes, false);
  const std::vector<float> inferred_values = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f, 0.7f, -0.8f};
  struct Case {
    RuntimeValue page;
    std::vector<float> expect;
  };
  for (const Case& c :
       {Case{RuntimeValue::Encoded(per_axis), axis_values},
        Case{RuntimeValue::Encoded(blocked), block_values}, Case{inferred, inferred_values}}) {
    auto kernel = MakeKernel(PagedNode());
    const RuntimeValue dense(Tensor::FromFloat("v", {1, 1, 4, 2}, std::vector<float>(8, 0.5f)));
    const RuntimeValue past = Cache({Block(0, 4, c.page, dense)});
    const Tensor q =
        Floats("q", {1, 1, 1, 2}, [](int64_t i) { return 0.3f + 0.1f * static_cast<float>(i); });
    const Tensor k = Floats("k", {1, 1, 1, 2}, [](int64_t) { return 0.2f; });
    const Tensor v = Floats("v", {1, 1, 1, 2}, [](int64_t i) { return static_cast<float>(i); });
    auto r = kernel->Run(q, k, v, past);
    std::vector<float> kk = c.expect, vv(8, 0.5f);
    kk.insert(kk.end(), {0.2f, 0.2f});
    vv.insert(vv.end(), {0.0f, 1.0f});
    const auto ref = ReferenceAttention(q.ToFloatVector(), kk, vv, 1, 1, 1, 1, 5, 2, 2);
    const auto y = r.y.ToFloatVector();
    for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - ref[i]) < 1e-5f);
    CHECK(r.statistics.dequantized_bytes == 4 * 2 * 4);
  }
}

TEST_CASE("Bad attributes, inputs and pages are rejected with messages naming them") {
  auto attribute = [](const char* name, int64_t value) {
    NodeProto node = PagedNode();
    auto* a = node.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(value);
    return node;
  };
  KernelContext ctx;
  auto configure = [&](const NodeProto& node) { PagedAttention(ctx).set_node(node); };
  ExpectError([&] { configure(attribute("is_causal", 2)); }, ErrorCode::kInvalidModel,
              {"attn", "is_causal must be 0 or 1"});
  ExpectError([&] { configure(attribute("block_size", 0)); }, ErrorCode::kInvalidModel,
              {"block_size must be positive"});
  ExpectError([&] { configure(attribute("max_tokens", -3)); }, ErrorCode::kInvalidModel,
              {"max_tokens must be positive"});
  ExpectError([&] { configure(attribute("left_window_size", -2)); }, ErrorCode::kInvalidModel,
              {"left_window_size"});
  ExpectError([&] { configure(attribute("scale", 2)); }, ErrorCode::kInvalidModel,
              {"unsupported attribute 'scale'"});
  NodeProto masked = PagedNode();
  masked.add_input("mask");
  ExpectError([&] { configure(masked); }, ErrorCode::kInvalidModel, {"mask"});

  auto kernel = MakeKernel(PagedNode());
  const RuntimeValue empty = PagedAttention::EmptyCache();
  const Tensor q = Floats("q", {1, 2, 1, 4}, [](int64_t) { return 0.1f; });
  const Tensor k = Floats("k", {1, 1, 1, 4}, [](int64_t) { return 0.1f; });
  const Tensor v = Floats("v", {1, 1, 1, 4}, [](int64_t) { return 0.1f; });
  ExpectError(
      [&] {
        kernel->Run(Floats("q", {1, 3, 1, 4}, [](int64_t) { return 0.f; }),
                    Floats("k", {1, 2, 1, 4}, [](int64_t) { return 0.f; }),
                    Floats("v", {1, 2, 1, 4}, [](int64_t) { return 0.f; }), empty);
      },
      ErrorCode::kInvalidArgument, {"multiple"});
  ExpectError(
      [&] {
        kernel->Run(q, Floats("k", {1, 1, 2, 4}, [](int64_t) { return 0.f; }), v, empty);
      },
      ErrorCode::kInvalidArgument, {"share batch and length"});
  ExpectError(
      [&] {
        kernel->Run(Floats("q", {1, 2, 1, 4}, [](int64_t i) { return i == 3 ? NAN : 0.f; }), k, v,
                    empty);
      },
      ErrorCode::kInvalidArgument, {"Q holds a non-finite value at element 3"});
  ExpectError([&] { kernel->Run(q, k, v, RuntimeValue(Tensor::FromFloat("p", {1}, {0.f}))); },
              ErrorCode::kInvalidArgument, {"past must be a paged cache"});

  auto page = [](int64_t cap, int64_t width) {
    return RuntimeValue(Tensor::FromFloat(
        "p", {1, 1, cap, width}, std::vector<float>(static_cast<size_t>(cap * width), 0.f)));
  };
  struct Bad {
    RuntimeValue cache;
    std::vector<std::string> words;
  };
  const Bad bad[] = {
      {Cache({Block(1, 2, page(2, 4), page(2, 4))}), {"past.blocks[0]", "not contiguous"}},
      {Cache({Block(0, 3, page(2, 4), page(2, 4))}),
       {"past.blocks[0]", "exceeds the page capacity 2"}},
      {Cache({Block(0, 1, page(2, 4), page(3, 4))}),
       {"key capacity 2 differs from value capacity 3"}},
      {Cache({Block(0, 0, page(2, 4), page(2, 4))}), {"length 0 is not positive"}},
      {Cache({Block(0, 2, page(2, 5), page(2, 4))}), {"past.blocks[0]", "do not fit"}},
      {Cache({Block(0, 2, page(2, 4), page(2, 4)), Block(3, 1, page(1, 4), page(1, 4))}),
       {"past.blocks[1]", "start 3 is not contiguous (expected 2)"}},
      {Cache({Block(0, 2,
                    RuntimeValue(Tensor::FromInt64("p", {1, 1, 2, 4}, std::vector<int64_t>(8, 0))),
                    page(2, 4))}),
       {"past.blocks[0].key", "FLOAT, FLOAT16 or BFLOAT16"}},
      {Cache({Block(0, 2, AffinePage(DataType::kUint4, 1, 0, {1, 1, 2, 1}, {1, 2}, false),
                    page(2, 1))}),
       {"ambiguous"}},
  };
  for (const Bad& b : bad) {
    const Tensor kk =
        Floats("k", {1, 1, 1, b.words[0] == "ambiguous" ? 1 : 4}, [](int64_t) { return 0.f; });
    const Tensor qq = Floats("q", {1, 2, 1, kk.dim(3)}, [](int64_t) { return 0.f; });
    ExpectErrorWords([&] { kernel->Run(qq, kk, kk, b.cache); }, ErrorCode::kInvalidArgument,
                     b.words);
  }

  auto bad_format = [&](PagedAttention::Format f) {
    auto selecting = MakeKernel(PagedNode(), [f](const Tensor&, const Tensor&, int64_t) {
      return Formats{f, {}};
    });
    selecting->Run(q, k, v, empty);
  };
  ExpectError(
      [&] {
        bad_format({TensorProto::INT16, 1, 0});
      },
      ErrorCode::kInvalidArgument, {"key format", "unsupported page format INT16"});
  ExpectError(
      [&] {
        bad_format({TensorProto::INT8, 0, 0});
      },
      ErrorCode::kInvalidArgument, {"scale must be positive and finite"});
  ExpectError(
      [&] {
        bad_format({TensorProto::UINT4, 1, 16});
      },
      ErrorCode::kInvalidArgument, {"zero point 16 is outside the UINT4 range [0, 15]"});

  NodeProto small = PagedNode();
  auto* a = small.add_attribute();
  a->set_name("max_tokens");
  a->set_type(AttributeProto::INT);
  a->set_i(2);
  auto bounded = MakeKernel(small);
  auto r = bounded->Run(Floats("q", {1, 2, 2, 4}, [](int64_t) { return 0.f; }),
                        Floats("k", {1, 1, 2, 4}, [](int64_t) { return 0.f; }),
                        Floats("v", {1, 1, 2, 4}, [](int64_t) { return 0.f; }), empty);
  ExpectError([&] { bounded->Run(q, k, v, r.present); }, ErrorCode::kInvalidArgument,
              {"2 retained + 1 new tokens exceed max_tokens 2"});
}
