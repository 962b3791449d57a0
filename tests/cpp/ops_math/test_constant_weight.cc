// A constant B of MatMul/Gemm is packed once and reused (ops/math/constant_weight.h): the
// reused pack gives the per-call results, is never served for other bytes, is built once
// under concurrent calls, on the second call of any shape, and only for inputs the plan
// declares constant.
#include <tbb/task_arena.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "executor/runtime_session.h"
#include "op_test_util.h"
#include "ops/math/constant_weight.h"
#include "ops/math/gemm.h"

using namespace ops_math_test;
using onnx_light::ModelProto;
using onnx_light::TensorProto;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;
using onnx_light::core::runtime::KernelBase;
using onnx_light::core::runtime::KernelInfo;
using onnx_light::core::runtime::RuntimeSession;
using onnx_light::core::runtime::RuntimeValueMap;
namespace math = onnx_light::ops::math;

namespace {

constexpr math::GemmPath kAllPaths[] = {math::GemmPath::kPortable, math::GemmPath::kAvx2,
                                        math::GemmPath::kAvx512};

std::vector<double> Ref(bool tb, int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
                        const std::vector<float>& b) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += static_cast<double>(a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      y[i * n + j] = s;
    }
  return y;
}

// The [K, N] transposed view of an [N, K] matrix `t` (what a folded Transpose gives MatMul).
Tensor TransposedView(const Tensor& t) {
  return Tensor::StridedView(t.name() + "T", t.dtype(), {t.dim(1), t.dim(0)}, {1, t.dim(1)},
                             t.strided_data(), t.owner());
}

// A MatMul or Gemm kernel built from the registry, called like the executor calls it.
class Kernel {
 public:
  explicit Kernel(const std::string& op, bool trans_b = false)
      : ctx_(KernelContext(onnx_light::core::runtime::OpsetMap{{"", 18}})) {
    node_.set_op_type(op);
    node_.set_name("n_" + op);
    node_.add_input("a");
    node_.add_input("b");
    node_.add_output("y");
    if (trans_b) {
      auto* attr = node_.add_attribute();
      attr->set_name("transB");
      attr->set_type(onnx_light::AttributeProto::INT);
      attr->set_i(1);
    }
    const auto* factory = onnx_light::core::runtime::BuiltinKernels().Find("", op, 18);
    REQUIRE(factory != nullptr);
    kernel_ = (*factory)(node_, ctx_, KernelInfo(node_, ctx_.kernel_ctx()));
  }
  KernelBase& get() { return *kernel_; }
  Tensor Run(const Tensor& a, const Tensor& b) const {
    const RuntimeValue av(a), bv(b);
    const RuntimeValue* in[] = {&av, &bv};
    RuntimeValue out;
    RuntimeValue* outs[] = {&out};
    KernelCall call(nullptr, node_, in, outs);
    kernel_->Compute(call);
    return out.tensor();
  }

 private:
  onnx_light::NodeProto node_;
  RuntimeContext ctx_;
  std::unique_ptr<KernelBase> kernel_;
};

std::vector<float> Values(const Tensor& t) { return t.ToFloatVector(); }

}  // namespace

TEST_CASE("SGEMM with a prepacked B gives bit-identical results to per-call packing") {
  // Sizes cross the register tile, the 256-deep depth block and the 96-row block.
  for (int64_t m : {2, 7, 100})
    for (int64_t n : {16, 67, 300})
      for (int64_t k : {5, 256, 300})
        for (bool tb : {false, true})
          for (math::GemmPath path : kAllPaths) {
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(tb);
            const std::vector<float> a = Random(m * k, -1, 1, 1), b = Random(k * n, -1, 1, 2);
            const math::PackedB packed(tb, k, n, b.data(), tb ? k : n);
            CHECK(packed.bytes() == static_cast<size_t>(k * ((n + 15) / 16 * 16)) * 4);
            std::vector<float> fresh(static_cast<size_t>(m * n)), cached = fresh;
            math::Sgemm(false, tb, m, n, k, 1.0f, a.data(), b.data(), 0.0f, fresh.data(), path);
            math::GemmArgs g;
            g.trans_b = tb;
            g.m = m;
            g.n = n;
            g.k = k;
            g.a = a.data();
            g.lda = k;
            g.b = b.data();
            g.ldb = tb ? k : n;
            g.c = cached.data();
            g.ldc = n;
            for (int repeat = 0; repeat < 2; ++repeat) {
              std::fill(cached.begin(), cached.end(), std::nanf(""));
              math::Sgemm(g, &packed, path);
              CHECK(cached == fresh);
            }
            CheckClose(cached, Ref(tb, m, n, k, a, b), 1e-5, 1e-5);
          }
}

TEST_CASE("SGEMM refuses a packed B of another shape or orientation") {
  const std::vector<float> a = Random(4 * 8), b = Random(8 * 32);
  std::vector<float> c(4 * 32);
  const math::PackedB packed(false, 8, 32, b.data(), 32);
  math::GemmArgs g;
  g.m = 4;
  g.n = 32;
  g.k = 8;
  g.a = a.data();
  g.lda = 8;
  g.b = b.data();
  g.ldb = 32;
  g.c = c.data();
  g.ldc = 32;
  g.trans_b = true;
  g.ldb = 8;
  CHECK_THROWS_AS(math::Sgemm(g, &packed), Error);
  g.trans_b = false;
  g.ldb = 32;
  g.n = 16;
  try {
    math::Sgemm(g, &packed);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("8 x 32 operand, the call needs 8 x 16") != std::string::npos);
  }
}

TEST_CASE("MatMul packs a declared constant B on its second call with M > 1, then reuses it") {
  const int64_t k = 40, n = 64;
  const Tensor w = RandF32({k, n}, -1, 1, 3);
  Kernel mm("MatMul");
  const long uses = w.owner_use_count();
  mm.get().OnConstantInput(1, RuntimeValue(w));
  // The kernel holds the weight's storage: its address cannot be reused by other bytes.
  CHECK(w.owner_use_count() == uses + 1);

  const uint64_t packs0 = math::BPacksForTesting();
  const Tensor a = RandF32({2, 3, k}, -1, 1, 4);  // batch folded into M = 6
  const Tensor y1 = mm.Run(a, w);                 // packs per call (no copy kept)
  CHECK(math::BPacksForTesting() == packs0 + 1);
  const Tensor y2 = mm.Run(a, w);  // builds the kept pack
  CHECK(math::BPacksForTesting() == packs0 + 2);
  const Tensor y3 = mm.Run(a, w);
  const Tensor y4 = mm.Run(a, w.BorrowView());  // another handle on the same storage
  CHECK(math::BPacksForTesting() == packs0 + 2);
  CHECK(y1.shape() == Shape{2, 3, n});
  CHECK(Values(y2) == Values(y1));
  CHECK(Values(y3) == Values(y1));
  CHECK(Values(y4) == Values(y1));
  CheckClose(Values(y1), Ref(false, 6, n, k, Values(a), Values(w)), 1e-5, 1e-5);

  // M == 1 streams the kept pack (no new pack).
  const Tensor row = RandF32({1, k}, -1, 1, 5);
  CheckClose(Values(mm.Run(row, w)), Ref(false, 1, n, k, Values(row), Values(w)), 1e-5, 1e-5);
  CHECK(math::BPacksForTesting() == packs0 + 2);
}

TEST_CASE("a MatMul whose constant B is used once keeps no copy, the second use keeps one") {
  const int64_t k = 32, n = 64;
  const Tensor w = RandF32({k, n}, -1, 1, 19);
  Kernel mm("MatMul");
  mm.get().OnConstantInput(1, RuntimeValue(w));
  const auto& heap = onnx_light::core::runtime::DefaultAllocator();
  const Tensor prompt = RandF32({16, k}, -1, 1, 20);
  const Tensor y = mm.Run(prompt, w);
  const size_t live = heap.live_bytes();
  CheckClose(Values(y), Ref(false, 16, n, k, Values(prompt), Values(w)), 1e-5, 1e-5);
  // The next call, decode-shaped (one row), keeps the copy: K * N floats, and every later
  // one streams it (M == 1 GEMV over the panels).
  for (int step = 0; step < 3; ++step) {
    const Tensor row = RandF32({1, k}, -1, 1, static_cast<uint32_t>(21 + step));
    CheckClose(Values(mm.Run(row, w)), Ref(false, 1, n, k, Values(row), Values(w)), 1e-5, 1e-5);
    CHECK(heap.live_bytes() >= live + static_cast<size_t>(k * n) * sizeof(float));
  }
  CHECK(Values(mm.Run(prompt, w)) == Values(y));
}

TEST_CASE("the M == 1 GEMV over a packed B matches the reference on every path") {
  // N crosses the 16-column panel and the 32-panel pass; K the 256-deep block and the
  // 4-step unroll.
  for (int64_t n : {16, 67, 300, 1000})
    for (int64_t k : {5, 256, 259, 600})
      for (bool tb : {false, true})
        for (bool ta : {false, true})
          for (math::GemmPath path : kAllPaths) {
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(tb);
            CAPTURE(ta);
            const std::vector<float> b = Random(k * n, -1, 1, 31);
            // A transposed A is a column of a [K, 3] matrix (stride 3).
            const std::vector<float> a_store = Random(3 * k, -1, 1, 32);
            std::vector<float> a(static_cast<size_t>(k));
            for (int64_t p = 0; p < k; ++p)
              a[static_cast<size_t>(p)] =
                  ta ? a_store[static_cast<size_t>(p * 3 + 1)] : a_store[static_cast<size_t>(p)];
            const math::PackedB packed(tb, k, n, b.data(), tb ? k : n);
            std::vector<float> c(static_cast<size_t>(n), std::nanf(""));
            math::GemmArgs g;
            g.trans_a = ta;
            g.trans_b = tb;
            g.m = 1;
            g.n = n;
            g.k = k;
            g.a = ta ? a_store.data() + 1 : a_store.data();
            g.lda = ta ? 3 : k;
            g.c = c.data();
            g.ldc = n;
            g.ldb = tb ? k : n;  // g.b stays null: the pack replaces it
            math::Sgemm(g, &packed, path);
            CheckClose(c, Ref(tb, 1, n, k, a, b), 1e-5, 1e-5);
            // alpha and beta apply as in the unpacked path.
            std::vector<float> c2(static_cast<size_t>(n), 2.0f);
            g.c = c2.data();
            g.alpha = 0.5f;
            g.beta = 3.0f;
            math::Sgemm(g, &packed, path);
            std::vector<double> expected = Ref(tb, 1, n, k, a, b);
            for (double& e : expected) e = 0.5 * e + 6.0;
            CheckClose(c2, expected, 1e-5, 1e-5);
          }
}

TEST_CASE("MatMul reads a constant B viewed transposed (a folded Transpose) without a copy") {
  const int64_t k = 48, n = 80;
  const Tensor e = RandF32({n, k}, -1, 1, 33);  // an embedding [vocab, hidden]
  const Tensor view = TransposedView(e);
  REQUIRE(!view.contiguous());
  REQUIRE(math::ConstantWeight::TransposedLd(view) == k);
  const std::vector<float> ev = Values(e);  // B = e^T: the reference reads e as [N, K]
  Kernel mm("MatMul");
  CHECK(mm.get().ReadsStridedInput(1));
  mm.get().OnConstantInput(1, RuntimeValue(view));
  const uint64_t packs = math::BPacksForTesting();
  for (int64_t m : {1, 6, 1, 1}) {
    CAPTURE(m);
    const Tensor a = RandF32({m, k}, -1, 1, static_cast<uint32_t>(34 + m));
    CheckClose(Values(mm.Run(a, view)), Ref(true, m, n, k, Values(a), ev), 1e-5, 1e-5);
  }
  // Unpacked on the first call, one pack built on the second, reused after.
  CHECK(math::BPacksForTesting() == packs + 1);
  // Not the declared view: another transposed view is multiplied unpacked, correctly.
  const Tensor other = RandF32({n, k}, -1, 1, 40);
  const Tensor other_view = TransposedView(other);
  const Tensor a = RandF32({1, k}, -1, 1, 41);
  CheckClose(Values(mm.Run(a, other_view)), Ref(true, 1, n, k, Values(a), Values(other)), 1e-5,
             1e-5);
}

TEST_CASE("MatMul reads a FLOAT16 constant B viewed transposed from 16-bit panels") {
  // The q4f16/fp16 tied embedding: Transpose(embedding) folds to this view, the LM head packs
  // it on its first call (its alternative is a dense copy per call) and the Gather keeps
  // reading the embedding's own rows.
  const int64_t k = 48, n = 80;
  const std::vector<float> ev = RoundTo(DataType::kFloat16, Random(n * k, -1, 1, 43));
  const Tensor e = Half(DataType::kFloat16, {n, k}, ev);
  const Tensor view = TransposedView(e);
  REQUIRE(math::ConstantWeight::TransposedLd(view) == k);
  Kernel mm("MatMul");
  mm.get().OnConstantInput(1, RuntimeValue(view));
  std::vector<float> first;
  for (int64_t m : {1, 6, 1}) {
    CAPTURE(m);
    const std::vector<float> av = RoundTo(DataType::kFloat16, Random(m * k, -1, 1, 44));
    const Tensor y = mm.Run(Half(DataType::kFloat16, {m, k}, av), view);
    REQUIRE(y.dtype() == DataType::kFloat16);
    REQUIRE(y.shape() == Shape{m, n});
    CheckClose(Values(y), Ref(true, m, n, k, av, ev), 2e-3, 2e-3);  // B = e^T
    if (m == 1 && first.empty())
      first = Values(y);
    else if (m == 1)
      CHECK(Values(y) == first);  // the pack of the first call, reused
  }
  CHECK(Values(e) == ev);  // the embedding's bytes are untouched
  // Not the declared view: another transposed FLOAT16 view is copied dense, correctly.
  const std::vector<float> ov = RoundTo(DataType::kFloat16, Random(n * k, -1, 1, 45));
  const Tensor other = Half(DataType::kFloat16, {n, k}, ov);
  const Tensor other_view = TransposedView(other);
  const std::vector<float> av = RoundTo(DataType::kFloat16, Random(k, -1, 1, 46));
  CheckClose(Values(mm.Run(Half(DataType::kFloat16, {1, k}, av), other_view)),
             Ref(true, 1, n, k, av, ov), 2e-3, 2e-3);
}

TEST_CASE("A FLOAT16 B viewed transposed is packed even over the budget (no copy per call)") {
  const int64_t k = 32, n = 64;
  const std::vector<float> ev = RoundTo(DataType::kFloat16, Random(n * k, -1, 1, 47));
  const Tensor e = Half(DataType::kFloat16, {n, k}, ev);
  const Tensor view = TransposedView(e);
  const std::vector<float> dv = RoundTo(DataType::kFloat16, Random(k * n, -1, 1, 48));
  const Tensor dense = Half(DataType::kFloat16, {k, n}, dv);
  const size_t budget = math::PackedWeightBudget(), before = math::PackedWeightBytes();
  math::SetPackedWeightBudget(0);
  {
    Kernel tied("MatMul"), plain("MatMul");
    tied.get().OnConstantInput(1, RuntimeValue(view));
    plain.get().OnConstantInput(1, RuntimeValue(dense));
    const Tensor a =
        Half(DataType::kFloat16, {1, k}, RoundTo(DataType::kFloat16, Random(k, -1, 1, 49)));
    for (int call = 0; call < 3; ++call) {
      tied.Run(a, view);
      plain.Run(a, dense);
    }
    // The view's panels only: the dense weight, over the budget, runs on its own bytes.
    CHECK(math::PackedWeightBytes() == before + static_cast<size_t>(k * n) * sizeof(uint16_t));
  }
  CHECK(math::PackedWeightBytes() == before);  // released with the kernel
  math::SetPackedWeightBudget(budget);
}

TEST_CASE("MatMul never serves the cached pack for a B in other storage or of another shape") {
  const int64_t k = 64, n = 64;
  Kernel mm("MatMul");
  const Tensor w = RandF32({k, n}, -1, 1, 6);
  mm.get().OnConstantInput(1, RuntimeValue(w));
  const Tensor a = RandF32({5, k}, -1, 1, 7);
  mm.Run(a, w);
  const Tensor y_w = mm.Run(a, w);  // served from the kept pack from now on
  const uint64_t packs = math::BPacksForTesting();

  // Same shape, new buffer, other values: packed per call, correct for its own values.
  const Tensor other = RandF32({k, n}, -1, 1, 8);
  const Tensor y_other = mm.Run(a, other);
  CHECK(math::BPacksForTesting() == packs + 1);
  CheckClose(Values(y_other), Ref(false, 5, n, k, Values(a), Values(other)), 1e-5, 1e-5);
  CHECK(Values(y_other) != Values(y_w));

  // A buffer freed and reallocated in a loop often lands at the same address; as long as
  // it is not the declared storage it is packed per call.
  for (int i = 0; i < 4; ++i) {
    const Tensor fresh = RandF32({k, n}, -1, 1, static_cast<uint32_t>(20 + i));
    CheckClose(Values(mm.Run(a, fresh)), Ref(false, 5, n, k, Values(a), Values(fresh)), 1e-5, 1e-5);
  }
  CHECK(math::BPacksForTesting() == packs + 5);

  // The declared bytes viewed with another shape ([32, 128]): not the declared operand.
  const Tensor wide = w.Reshaped({32, 128});
  const Tensor a32 = RandF32({3, 32}, -1, 1, 9);
  CheckClose(Values(mm.Run(a32, wide)), Ref(false, 3, 128, 32, Values(a32), Values(w)), 1e-5, 1e-5);
  CHECK(math::BPacksForTesting() == packs + 6);

  // The declared constant itself is still served from its pack, unchanged.
  CHECK(Values(mm.Run(a, w)) == Values(y_w));
  CHECK(math::BPacksForTesting() == packs + 6);
}

TEST_CASE("MatMul keeps no pack for a narrow constant B (padding would dominate)") {
  Kernel mm("MatMul");
  const Tensor w = RandF32({30, 17}, -1, 1, 10);  // 17 columns pad to 32
  mm.get().OnConstantInput(1, RuntimeValue(w));
  const Tensor a = RandF32({4, 30}, -1, 1, 11);
  const uint64_t packs = math::BPacksForTesting();
  for (int i = 0; i < 3; ++i)
    CheckClose(Values(mm.Run(a, w)), Ref(false, 4, 17, 30, Values(a), Values(w)), 1e-5, 1e-5);
  CHECK(math::BPacksForTesting() == packs + 3);
}

TEST_CASE("Gemm with a constant transposed B packs it once and matches the reference") {
  const int64_t m = 9, n = 80, k = 300;
  Kernel gemm("Gemm", /*trans_b=*/true);
  const Tensor w = RandF32({n, k}, -1, 1, 12);
  gemm.get().OnConstantInput(1, RuntimeValue(w));
  const Tensor a = RandF32({m, k}, -1, 1, 13);
  const uint64_t packs = math::BPacksForTesting();
  const Tensor y1 = gemm.Run(a, w);
  const Tensor y2 = gemm.Run(a, w);
  const Tensor y3 = gemm.Run(a, w);
  CHECK(math::BPacksForTesting() == packs + 2);  // per call, then the kept pack
  CHECK(Values(y1) == Values(y2));
  CHECK(Values(y1) == Values(y3));
  CheckClose(Values(y1), Ref(true, m, n, k, Values(a), Values(w)), 1e-5, 1e-5);
}

TEST_CASE("FLOAT16 MatMul with a constant B keeps one 16-bit pack, never a FLOAT one") {
  const int64_t k = 24, n = 64;
  const std::vector<float> wv = Random(k * n, -1, 1, 15);
  const Tensor w = Half(DataType::kFloat16, {k, n}, wv);
  for (const int64_t m : {1, 4, 9}) {  // the GEMV and the panel GEMM
    CAPTURE(m);
    const std::vector<float> av = Random(m * k, -1, 1, 14);
    const Tensor a = Half(DataType::kFloat16, {m, k}, av);
    Kernel mm("MatMul");
    mm.get().OnConstantInput(1, RuntimeValue(w));
    const uint64_t packs = math::BPacksForTesting();
    const size_t kept = math::PackedWeightBytes();
    const Tensor y1 = mm.Run(a, w);  // row-major B
    CHECK(math::PackedWeightBytes() == kept);
    const Tensor y2 = mm.Run(a, w);  // builds the 16-bit panels: K x 64 halves
    CHECK(math::PackedWeightBytes() == kept + static_cast<size_t>(k * n) * sizeof(uint16_t));
    const Tensor y3 = mm.Run(a, w);
    CHECK(math::BPacksForTesting() == packs);  // no FLOAT pack, kept or per call
    CHECK(y1.dtype() == DataType::kFloat16);
    CHECK(Values(y1) == Values(y2));  // the same sums in the same order either way
    CHECK(Values(y1) == Values(y3));
    CheckClose(
        Values(y1),
        Ref(false, m, n, k, RoundTo(DataType::kFloat16, av), RoundTo(DataType::kFloat16, wv)), 2e-3,
        2e-3);
  }
}

TEST_CASE("concurrent calls on one kernel build the kept pack of the constant B exactly once") {
  const int64_t k = 128, n = 96;
  Kernel mm("MatMul");
  const Tensor w = RandF32({k, n}, -1, 1, 16);
  mm.get().OnConstantInput(1, RuntimeValue(w));
  constexpr int kThreads = 4, kCalls = 8;
  std::vector<Tensor> inputs;
  std::vector<std::vector<double>> expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(RandF32({3 + t, k}, -1, 1, static_cast<uint32_t>(30 + t)));
    expected.push_back(Ref(false, 3 + t, n, k, Values(inputs.back()), Values(w)));
  }
  std::vector<std::vector<Tensor>> results(kThreads);
  const uint64_t packs = math::BPacksForTesting();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c)
        results[static_cast<size_t>(t)].push_back(mm.Run(inputs[static_cast<size_t>(t)], w));
    });
  for (auto& th : threads) th.join();
  // The first call packs per call, the second builds the kept pack, the other 30 reuse it.
  CHECK(math::BPacksForTesting() == packs + 2);
  for (int t = 0; t < kThreads; ++t)
    for (const Tensor& y : results[static_cast<size_t>(t)])
      CheckClose(Values(y), expected[static_cast<size_t>(t)], 1e-5, 1e-5);
}

namespace {

// Y = X @ W with W [k, n] an initializer; when `w_is_input`, W is also a graph input (the
// initializer is only its default, which a feed may replace: not a constant).
std::shared_ptr<ModelProto> MatMulModel(int64_t k, int64_t n, const std::vector<float>& w,
                                        bool w_is_input) {
  auto model = std::make_shared<ModelProto>();
  model->set_ir_version(10);
  model->add_opset_import()->set_version(18);
  auto* graph = model->mutable_graph();
  graph->add_input()->set_name("X");
  if (w_is_input) graph->add_input()->set_name("W");
  TensorProto* init = graph->add_initializer();
  init->set_name("W");
  init->set_data_type(TensorProto::FLOAT);
  init->add_dims(k);
  init->add_dims(n);
  for (float v : w) init->add_float_data(v);
  auto* node = graph->add_node();
  node->set_op_type("MatMul");
  node->set_name("mm");
  node->add_input("X");
  node->add_input("W");
  node->add_output("Y");
  graph->add_output()->set_name("Y");
  return model;
}

}  // namespace

TEST_CASE("a plan declares initializers constant to MatMul, but not initializers of inputs") {
  const int64_t k = 32, n = 64;
  const std::vector<float> w = Random(k * n, -1, 1, 17);
  const Tensor x = RandF32({5, k}, -1, 1, 18);
  const std::vector<double> expected = Ref(false, 5, n, k, Values(x), w);
  for (bool w_is_input : {false, true}) {
    CAPTURE(w_is_input);
    RuntimeSession session(MatMulModel(k, n, w, w_is_input));
    RuntimeContext ctx;
    const uint64_t packs = math::BPacksForTesting();
    for (int run = 0; run < 3; ++run) {
      RuntimeValueMap feeds;
      feeds["X"] = RuntimeValue(x);
      const RuntimeValueMap out = session.Run(ctx, std::move(feeds));
      CheckClose(Values(out.at("Y").tensor()), expected, 1e-5, 1e-5);
    }
    // Constant: packed per call on the first run, kept on the second, reused on the third.
    // Graph input: packed on every run.
    CHECK(math::BPacksForTesting() == packs + (w_is_input ? 3 : 2));
  }
}

TEST_CASE("SGEMM matches the reference however it splits the work (1, 2 or 8 threads)") {
  // Many row blocks (M = 400: 5 of 96) for 1 or 2 threads take one column block per task;
  // for 8 they are split over columns too; a 16-row prompt splits over columns only.
  for (int threads : {1, 2, 8})
    for (int64_t m : {16, 400})
      for (bool tb : {false, true}) {
        CAPTURE(threads);
        CAPTURE(m);
        CAPTURE(tb);
        const int64_t n = 200, k = 300;
        const std::vector<float> a = Random(m * k, -1, 1, 40), b = Random(k * n, -1, 1, 41);
        const math::PackedB packed(tb, k, n, b.data(), tb ? k : n);
        std::vector<float> fresh(static_cast<size_t>(m * n)), kept = fresh;
        // All slots reserved for this thread: the split follows max_concurrency() without
        // asking TBB for workers the machine may not have.
        tbb::task_arena arena(threads, static_cast<unsigned>(threads));
        arena.execute([&] {
          for (math::GemmPath path : kAllPaths) {
            math::GemmArgs g;
            g.trans_b = tb;
            g.m = m;
            g.n = n;
            g.k = k;
            g.a = a.data();
            g.lda = k;
            g.b = b.data();
            g.ldb = tb ? k : n;
            g.ldc = n;
            g.c = fresh.data();
            math::Sgemm(g, nullptr, path);
            g.c = kept.data();
            math::Sgemm(g, &packed, path);
            CHECK(kept == fresh);
            CheckClose(fresh, Ref(tb, m, n, k, a, b), 1e-5, 1e-5);
          }
        });
      }
}

TEST_CASE("kept packs stay within the process-wide budget and give it back when they die") {
  const size_t budget = math::PackedWeightBudget();
  const size_t before = math::PackedWeightBytes();
  const size_t w_bytes = 64 * 64 * sizeof(float);
  math::SetPackedWeightBudget(before + w_bytes + w_bytes / 2);  // room for one 64 x 64 pack
  const Tensor a = RandF32({4, 64}, -1, 1, 50);
  const uint64_t packs = math::BPacksForTesting();
  {
    Kernel first("MatMul"), second("MatMul");
    const Tensor w1 = RandF32({64, 64}, -1, 1, 51), w2 = RandF32({64, 64}, -1, 1, 52);
    first.get().OnConstantInput(1, RuntimeValue(w1));
    second.get().OnConstantInput(1, RuntimeValue(w2));
    for (int call = 0; call < 3; ++call) {
      CheckClose(Values(first.Run(a, w1)), Ref(false, 4, 64, 64, Values(a), Values(w1)), 1e-5,
                 1e-5);
      CheckClose(Values(second.Run(a, w2)), Ref(false, 4, 64, 64, Values(a), Values(w2)), 1e-5,
                 1e-5);
    }
    CHECK(math::PackedWeightBytes() == before + w_bytes);  // the first kept its pack
    // first: per call, then kept (2 packs); second: over budget, per call every time (3).
    CHECK(math::BPacksForTesting() == packs + 5);
  }
  CHECK(math::PackedWeightBytes() == before);
  math::SetPackedWeightBudget(budget);
}

TEST_CASE("a strided view over the constant's bytes is never served from its pack") {
  const int64_t k = 64, n = 64;
  const Tensor w = RandF32({k, n}, -1, 1, 60);
  math::ConstantWeight weight;
  weight.Declare(RuntimeValue(w));
  const auto values = [&] { return w.data<float>(); };
  CHECK(weight.Get(w, false, k, n, n, values) == nullptr);  // first use: per call
  const math::PackedB* kept = weight.Get(w, false, k, n, n, values);
  REQUIRE(kept != nullptr);
  // Same data pointer, shape and dtype, transposed layout: other values at each index.
  const Tensor transposed = TransposedView(w);
  REQUIRE(!transposed.contiguous());
  CHECK(weight.Get(transposed, false, k, n, n, values) == nullptr);
  // Dense strides make an ordinary tensor over the same bytes: the same operand.
  const Tensor dense =
      Tensor::StridedView("d", DataType::kFloat, {k, n}, {n, 1}, w.strided_data(), w.owner());
  CHECK(weight.Get(dense, false, k, n, n, values) == kept);
}
