#include <doctest/doctest.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include "core/text_parser.h"
#include "onnx_light.pb.h"
#include "state/async_state.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;

namespace {

std::shared_ptr<const ModelProto> Accumulate() {
  auto model = std::make_shared<ModelProto>(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "accumulate (float[2] delta, float[2] past) => (float[2] present)"
                       "{ present = Add(delta, past) }"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

RuntimeValueMap Delta() {
  RuntimeValueMap feeds;
  feeds.emplace("delta", RuntimeValue(Tensor::FromFloat("delta", {2}, {1.f, 1.f})));
  return feeds;
}

asio::awaitable<std::vector<float>> ThreeSteps(PersistentValueState& state,
                                               RuntimeContext& context) {
  RuntimeValueMap out;
  for (int i = 0; i < 3; ++i) out = co_await state.AsyncRun(context, Delta(), asio::use_awaitable);
  co_return out.at("present").tensor().ToFloatVector();
}

}  // namespace

TEST_CASE("co_await state.AsyncRun advances the state like Run") {
  RuntimeValueMap initial;
  initial.emplace("past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f})));
  PersistentValueState state(Accumulate(), std::move(initial));
  RuntimeContext context(KernelContext(18));
  asio::io_context io;
  std::vector<float> result;
  asio::co_spawn(io, ThreeSteps(state, context), [&](std::exception_ptr e, std::vector<float> r) {
    CHECK_FALSE(e);
    result = std::move(r);
  });
  io.run();
  CHECK(result == std::vector<float>{3.f, 3.f});
}

TEST_CASE("AsyncRun errors arrive as exceptions and leave the state usable") {
  RuntimeValueMap initial;
  initial.emplace("past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f})));
  PersistentValueState state(Accumulate(), std::move(initial));
  RuntimeContext context(KernelContext(18));
  RuntimeValueMap bad;
  bad.emplace("nope", RuntimeValue(Tensor::FromFloat("nope", {2}, {1.f, 1.f})));
  auto failed = state.AsyncRun(context, std::move(bad), asio::use_future);
  CHECK_THROWS_AS(failed.get(), core::Error);
  auto ok = state.AsyncRun(context, Delta(), asio::use_future);
  CHECK(ok.get().at("present").tensor().ToFloatVector() == std::vector<float>{1.f, 1.f});
}

TEST_CASE("AsyncGenerate returns the prompt plus generated tokens through a future") {
  // Next token = (token + 1) mod 4 via Gather on a shifted identity; no bindings.
  auto model = std::make_shared<ModelProto>(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "counter (int64[B, S] input_ids) => (float[B, S, 4] logits)"
                       "<float[4, 4] table = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0}>"
                       "{ logits = Gather<axis = 0>(table, input_ids) }"));
  RuntimeContext context(KernelContext(18));
  RuntimeValueMap feeds;
  feeds.emplace("input_ids", RuntimeValue(Tensor::FromInt64("input_ids", {1, 1}, {2})));
  GenerationOptions options;
  options.max_new_tokens = 3;
  auto future = AsyncGenerate(model, context, std::move(feeds), options, asio::use_future);
  CHECK(future.get().ToInt64Vector() == std::vector<int64_t>{2, 3, 0, 1});
}
