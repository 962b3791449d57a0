// A KV budget in bytes (SchedulerOptions::max_kv_bytes): the bytes per token come from the
// cache declarations (state/kv_cache_size.h); a model whose declarations give none is
// refused; with a declared paged layout grow_and_preempt works in bytes as in tokens.
#include <doctest/doctest.h>

#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "core/error.h"
#include "executor/runtime_context.h"
#include "ops/ai_rt/paged_attention.h"
#include "rows_decoder.h"
#include "state/generate.h"
#include "state/kv_cache_size.h"
#include "state/request_scheduler.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using onnx_light::onnx_kernels::kernel::PagedAttention;
using test_util::RowsDecoder;
using test_util::RowsFeeds;
using test_util::TokenRow;

namespace {

void AddField(StructTypeProto* s, const std::string& name, int32_t dtype,
              const std::vector<std::string>& dims) {
  auto* t = s->add_field();
  t->set_name(name);
  auto* tensor = t->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(dtype);
  auto* shape = tensor->mutable_shape();
  for (const std::string& d : dims) {
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      shape->add_dim()->set_dim_value(std::stoll(d));
    else
      shape->add_dim()->set_dim_param(d);
  }
}

// The row-caches decoder with its paged cache layout declared: key and value pages
// [batch, kKvHeads, capacity, kHeadSize] FLOAT, so 2 x 2 x 8 x 4 = 128 bytes per token.
std::shared_ptr<const ModelProto> DeclaredLayoutDecoder() {
  auto model = std::make_shared<ModelProto>(*RowsDecoder());
  const std::string heads = std::to_string(test_util::kKvHeads);
  const std::string width = std::to_string(test_util::kHeadSize);
  TypeProto declared;
  auto* cache = declared.mutable_sequence_type()->mutable_elem_type()->mutable_struct_type();
  auto* blocks = cache->add_field();
  blocks->set_name("blocks");
  auto* block = blocks->mutable_type()->mutable_sequence_type()->mutable_elem_type();
  StructTypeProto* b = block->mutable_struct_type();
  AddField(b, "start", TensorProto::INT64, {});
  AddField(b, "length", TensorProto::INT64, {});
  AddField(b, "key", TensorProto::FLOAT, {"batch", heads, "capacity", width});
  AddField(b, "value", TensorProto::FLOAT, {"batch", heads, "capacity", width});
  GraphProto* g = model->mutable_graph();
  for (auto& v : *g->mutable_input())
    if (v.name() == "past") *v.mutable_type() = declared;
  for (auto& v : *g->mutable_output())
    if (v.name() == "present") *v.mutable_type() = declared;
  return model;
}

}  // namespace

TEST_CASE("KV bytes per token come from the cache declarations, or say why they cannot") {
  CHECK(KvBytesPerToken(*DeclaredLayoutDecoder()).bytes == 128);
  // Paged caches take whole pages of the PagedAttention's block_size (default 16).
  CHECK(KvBytesPerToken(*DeclaredLayoutDecoder()).page_tokens == 16);
  ModelProto blocks_of_4 = *DeclaredLayoutDecoder();
  for (auto& node : *blocks_of_4.mutable_graph()->mutable_node()) {
    if (node.op_type() != "PagedAttention") continue;
    auto* a = node.add_attribute();
    a->set_name("block_size");
    a->set_type(AttributeProto::INT);
    a->set_i(4);
  }
  CHECK(KvBytesPerToken(blocks_of_4).page_tokens == 4);
  const KvTokenBytes layout_less = KvBytesPerToken(*RowsDecoder());
  CHECK(layout_less.bytes == 0);
  CHECK(layout_less.why_not.find("'past'") != std::string::npos);

  RuntimeContext context;
  RequestScheduler scheduler(context, {.max_kv_bytes = 4096});
  RequestHandle refused =
      scheduler.Submit({RowsDecoder(), nullptr, RowsFeeds({1, 2}), {}, {}, nullptr, nullptr});
  test_util::ExpectError([&] { refused.Get(); }, ErrorCode::kInvalidArgument,
                         "RequestScheduler: request 0: max_kv_bytes needs the model's KV bytes "
                         "per token, but the declaration of the cache input 'past' gives no "
                         "size per token");
  test_util::ExpectError(
      [&] { RequestScheduler both(context, {.max_kv_tokens = 10, .max_kv_bytes = 10}); },
      ErrorCode::kInvalidArgument, "set max_kv_tokens or max_kv_bytes, not both");
}

TEST_CASE(
    "grow_and_preempt with a budget in bytes: preempted requests give their alone tokens, the "
    "charges are whole pages within the bytes, one that never fits is refused in bytes") {
  const std::shared_ptr<const ModelProto> model = DeclaredLayoutDecoder();
  RuntimeContext context;
  std::vector<std::vector<int64_t>> prompts = {{4, 1}, {9, 9, 2, 7}, {3}, {5, 6, 7}, {8, 8}};
  GenerationOptions options;
  // Worst case <= 18 tokens: two pages of 16, 4096 bytes. Two requests start (a page each);
  // the first to cross into its second page does not fit beside the other.
  options.max_new_tokens = 14;
  constexpr int64_t kPage = 16 * 128;
  constexpr int64_t kBudget = 40 * 128;
  RequestScheduler scheduler(
      context,
      {.max_in_flight = 8, .max_kv_bytes = kBudget, .kv_admission = KvAdmission::kGrowAndPreempt});
  std::vector<RequestHandle> handles =
      test_util::SubmitTogether(scheduler, model, prompts, options);
  GenerationOptions long_options;
  long_options.max_new_tokens = 40;  // 3 + 40 tokens: three pages, 6144 bytes > 5120
  RequestHandle too_big =
      scheduler.Submit({model, nullptr, RowsFeeds({1, 1, 1}), long_options, {}, nullptr, nullptr});
  test_util::ExpectError([&] { too_big.Get(); }, ErrorCode::kResourceExhausted,
                         "RequestScheduler: request 5 needs 6144 KV bytes (rows x (prompt + "
                         "max_new_tokens), in whole pages of 16 tokens, x 128 bytes per token) "
                         "but max_kv_bytes is 5120");
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(TokenRow(handles[i].Get().tokens) ==
          TokenRow(Generate(model, context, RowsFeeds(prompts[i]), options)));
  }
  scheduler.WaitIdle();
  const SchedulerStats stats = scheduler.stats();
  CHECK(stats.preemptions > 0);
  CHECK(stats.peak_kv_bytes_reserved <= kBudget);
  CHECK(stats.peak_kv_bytes_reserved == 128 * stats.peak_kv_tokens_reserved);
  CHECK(stats.peak_kv_bytes_reserved % kPage == 0);
  CHECK(stats.peak_kv_bytes_reserved ==
        2 * kPage);  // two pages: one request past 16 tokens, or two
  CHECK(stats.kv_bytes_reserved == 0);
}

TEST_CASE(
    "max_kv_bytes charges a token at the page storage the context's PagedAttention writes "
    "when it is set, else at the declared layout") {
  // INT8 keys and UINT4 values: 2 x 8 + 2 x 8 / 2 = 24 bytes per token instead of 128.
  const KvPageStorage int8_uint4{TensorProto::INT8, TensorProto::UINT4};
  CHECK(KvBytesPerToken(*DeclaredLayoutDecoder(), &int8_uint4).bytes == 24);
  const KvPageStorage strings{TensorProto::FLOAT, TensorProto::STRING};
  const KvTokenBytes refused = KvBytesPerToken(*DeclaredLayoutDecoder(), &strings);
  CHECK(refused.bytes == 0);
  CHECK(refused.why_not ==
        "the context's KV page storage (key type 1, value type 8) is not a page format (FLOAT, "
        "FLOAT16, BFLOAT16, INT8, UINT8, INT4, UINT4, INT2 or UINT2)");

  const std::shared_ptr<const ModelProto> model = DeclaredLayoutDecoder();
  RuntimeContext context;
  PagedAttention::FormatSelector int8 = [](const Tensor&, const Tensor&, int64_t) {
    return PagedAttention::Formats{{TensorProto::INT8, 0.05f, 0}, {TensorProto::INT8, 0.05f, 0}};
  };
  context.RegisterKernelFn(
      "ai.rt", "PagedAttention", symbolic::Device::kCPU,
      [int8](const NodeProto& node, RuntimeContext& rt) -> std::unique_ptr<KernelBase> {
        auto kernel = std::make_unique<PagedAttention>(rt.kernel_ctx(), int8);
        kernel->set_node(node);
        return kernel;
      });
  GenerationOptions options;
  options.max_new_tokens = 10;  // 3 + 10 tokens: one page of 16 a request
  const std::vector<std::vector<int64_t>> prompts = {{4, 1, 7}, {9, 2, 5}};
  constexpr int64_t kBudget = 2 * 16 * 32;  // two INT8 pages
  {  // the declared FLOAT layout: one request's page alone is 2048 bytes
    RequestScheduler scheduler(context, {.max_kv_bytes = kBudget});
    RequestHandle refused =
        scheduler.Submit({model, nullptr, RowsFeeds(prompts[0]), options, {}, nullptr, nullptr});
    test_util::ExpectError([&] { refused.Get(); }, ErrorCode::kResourceExhausted,
                           "needs 2048 KV bytes (rows x (prompt + max_new_tokens), in whole "
                           "pages of 16 tokens, x 128 bytes per token) but max_kv_bytes is 1024");
  }
  context.set_kv_page_storage(KvPageStorage{TensorProto::INT8, TensorProto::INT8});
  RequestScheduler scheduler(context, {.max_in_flight = 4, .max_kv_bytes = kBudget});
  std::vector<RequestHandle> handles =
      test_util::SubmitTogether(scheduler, model, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(TokenRow(handles[i].Get().tokens) ==
          TokenRow(Generate(model, context, RowsFeeds(prompts[i]), options)));
    CHECK(handles[i].Get().stats.kv_bytes_per_token == 32);
  }
  scheduler.WaitIdle();
  const SchedulerStats stats = scheduler.stats();
  CHECK(stats.peak_kv_bytes_reserved == kBudget);  // both at once, a page of 512 bytes each
  CHECK(stats.max_batch_size == 2);
  CHECK(stats.kv_bytes_reserved == 0);
}
