// RuntimeSessionOptions::max_run_bytes on a state: a run that would hold more bytes at once
// fails naming the node and the sizes, publishes nothing, and the state goes on.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/text_parser.h"
#include "executor/runtime_session.h"
#include "state/persistent_value_state.h"
#include "state_kernels.h"
#include "tests/cpp/expect_error.h"

using namespace onnx_light;
using namespace onnx_light::core;
using namespace onnx_light::core::runtime;
using namespace state_test;
using test_util::ExpectError;

namespace {

// present = past + width: the run allocates a `width`-element row of ones ([width] FLOAT,
// 4 * width bytes) and sums it, so its memory follows a feed, not the retained value.
std::shared_ptr<const ModelProto> WideStep() {
  auto model = std::make_shared<ModelProto>(
      ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>\n"
                 "wide_step (int64[1] width, float[1] past) => (float[1] present) {\n"
                 "  wide = ConstantOfShape <value = float[1] {1.0}> (width)\n"
                 "  total = ReduceSum (wide)\n"
                 "  present = Add (past, total)\n"
                 "}"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  model->mutable_graph()->mutable_node(0)->set_name("wide");
  return model;
}

std::shared_ptr<const RuntimeSession> Session(size_t max_run_bytes,
                                              RuntimeSessionOptions::ExecutorMode executor) {
  RuntimeSessionOptions options;
  options.max_run_bytes = max_run_bytes;
  options.executor = executor;
  return std::make_shared<const RuntimeSession>(WideStep(), options);
}

RuntimeValueMap Width(int64_t width) {
  return {{"width", RuntimeValue(Tensor::FromInt64("width", {1}, {width}))}};
}

}  // namespace

TEST_CASE("A run past max_run_bytes fails naming the node and sizes and publishes nothing") {
  for (auto executor : {RuntimeSessionOptions::ExecutorMode::kInline,
                        RuntimeSessionOptions::ExecutorMode::kFlowGraph}) {
    CAPTURE(static_cast<int>(executor));
    PersistentValueState state(Session(4096, executor),
                               {{"past", RuntimeValue(Tensor::FromFloat("past", {1}, {5.f}))}});
    RuntimeContext context(KernelContext(18));
    CHECK(Read(state.Run(context, Width(4)).at("present")) == std::vector<float>{9.f});
    const RuntimeValue before = state.Values().at("past");
    // 2048 ones are 8192 bytes: the allocation is refused before anything is taken.
    ExpectError([&] { state.Run(context, Width(2048)); }, ErrorCode::kResourceExhausted,
                {"ConstantOfShape node 'wide'", "allocating 8192 bytes",
                 "this run's live allocations from 0 bytes", "max_run_bytes = 4096"});
    const RuntimeValue after = state.Values().at("past");
    CHECK(after.tensor().raw_data() == before.tensor().raw_data());
    CHECK(after.tensor().owner() == before.tensor().owner());
    CHECK(Read(after) == std::vector<float>{9.f});
    // The same state runs a call that fits; a state on a session with a raised limit runs
    // the refused one from the same values.
    CHECK(Read(state.Run(context, Width(1000)).at("present")) == std::vector<float>{1009.f});
    PersistentValueState raised(Session(size_t{1} << 20, executor), state.Values());
    CHECK(Read(raised.Run(context, Width(2048)).at("present")) == std::vector<float>{3057.f});
  }
}

TEST_CASE("max_run_bytes counts what the run holds at once, not what it allocated in total") {
  // 1000 ones (4000 bytes) then their sum: at most 4000 + 4 bytes live together, although
  // the run allocates 4008 bytes in all (the row dies before Add allocates present).
  PersistentValueState state(Session(4004, RuntimeSessionOptions::ExecutorMode::kInline),
                             {{"past", RuntimeValue(Tensor::FromFloat("past", {1}, {0.f}))}});
  RuntimeContext context(KernelContext(18));
  CHECK(Read(state.Run(context, Width(1000)).at("present")) == std::vector<float>{1000.f});
  ExpectError([&] { state.Run(context, Width(1001)); }, ErrorCode::kResourceExhausted,
              {"ReduceSum", "allocating 4 bytes", "from 4004 bytes", "max_run_bytes = 4004"});
  CHECK(Read(state.Values().at("past")) == std::vector<float>{1000.f});
}

TEST_CASE("max_run_bytes defaults to 0, unlimited") {
  CHECK(RuntimeSessionOptions().max_run_bytes == 0);
  PersistentValueState state(Session(0, RuntimeSessionOptions::ExecutorMode::kAuto),
                             {{"past", RuntimeValue(Tensor::FromFloat("past", {1}, {0.f}))}});
  RuntimeContext context(KernelContext(18));
  CHECK(Read(state.Run(context, Width(1 << 20)).at("present")) == std::vector<float>{1048576.f});
}
