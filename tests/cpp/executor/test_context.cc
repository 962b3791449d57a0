#include <doctest/doctest.h>

#include <string>

#include "executor/runtime_session.h"
#include "test_kernels.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::Error;
using onnx_light::testing::Floats;
using onnx_light::testing::ParseModelText;
using onnx_light::testing::Probe;
using onnx_light::testing::RegisterTestKernels;

namespace {

// test::Stash(x) -> y: records what the child context sees, stores "scratch" there, reads x
// back through get_value and writes y through put_value.
struct StashLog {
  std::vector<bool> saw_scratch;
  std::vector<bool> x_same_bytes;
};

class StashKernel final : public KernelBase {
 public:
  explicit StashKernel(StashLog& log) : log_(log) {}
  void Compute(KernelCall& call) const override {
    RuntimeContext& ctx = call.context();
    log_.saw_scratch.push_back(ctx.has_value("scratch"));
    ctx.put_value("scratch", RuntimeValue(Floats("scratch", {1}, {1})));
    log_.x_same_bytes.push_back(ctx.get_value("x").tensor().raw_data() == call.input(0).raw_data());
    ctx.put_value("y", call.input_value(0).BorrowView());
    RuntimeEvent event;
    event.action = RuntimeEventAction::kPersistentStorage;
    event.node_name = call.node().name();
    event.storage_allocations = 1;
    event.storage_allocated_bytes = 128;
    ctx.RecordEvent(event);
  }

 private:
  StashLog& log_;
};

std::shared_ptr<ModelProto> StashModel() {
  return ParseModelText(
      "ir_version: 10 opset_import { domain: \"\" version: 18 } "
      "opset_import { domain: \"test\" version: 1 } graph { input { name: \"x\" } "
      "node { name: \"stash\" op_type: \"Stash\" domain: \"test\" input: \"x\" output: \"y\" } "
      "node { name: \"step\" op_type: \"Step\" domain: \"test\" input: \"y\" output: \"z\" } "
      "output { name: \"z\" } }");
}

void RegisterStash(RuntimeContext& ctx, StashLog& log) {
  ctx.RegisterKernelFn("test", "Stash", core::symbolic::Device::kCPU,
                       [&log](const NodeProto& node, RuntimeContext&, const KernelInfo&) {
                         auto k = std::make_unique<StashKernel>(log);
                         k->set_node(node);
                         return std::unique_ptr<KernelBase>(std::move(k));
                       });
}

RuntimeValueMap Feed() {
  RuntimeValueMap feeds;
  feeds["x"] = RuntimeValue(Floats("x", {2}, {1, 2}));
  return feeds;
}

}  // namespace

TEST_CASE("each run executes in a fresh child context that never leaks into the caller's") {
  Probe probe;
  StashLog log;
  RuntimeContext ctx;
  RegisterTestKernels(ctx, probe);
  RegisterStash(ctx, log);
  RuntimeSession session(StashModel());
  for (int run = 0; run < 2; ++run) {
    auto out = session.Run(ctx, Feed());
    CHECK(out.at("z").tensor().ToFloatVector() == std::vector<float>{2, 3});
  }
  // Neither run saw the other's "scratch"; get_value("x") resolved to the frame's slot.
  CHECK(log.saw_scratch == std::vector<bool>{false, false});
  CHECK(log.x_same_bytes == std::vector<bool>{true, true});
  CHECK(ctx.values().empty());
  CHECK_FALSE(ctx.has_value("scratch"));
  CHECK_THROWS_WITH_AS(ctx.get_value("scratch"), "RuntimeContext has no value named 'scratch'",
                       Error);
  // A root context keeps put_value values in its own store; a child starts empty.
  ctx.put_value("k", RuntimeValue(Floats("k", {1}, {5})));
  CHECK(ctx.get_value("k").tensor().ToFloatVector() == std::vector<float>{5});
  RuntimeContext child = ctx.MakeChild();
  CHECK(child.is_child());
  CHECK_FALSE(child.has_value("k"));
  CHECK(child.config_id() == ctx.config_id());
  CHECK(&child.allocator() == &ctx.allocator());
  CHECK(child.custom_kernels().Contains("test", "Stash"));
}

TEST_CASE("events are shared by child contexts and absent when disabled") {
  Probe probe;
  StashLog log;
  onnx_light::testing::CountingAllocator allocator;
  RuntimeContext ctx(KernelContext(18), RuntimeContextOptions{.events_enabled = true});
  ctx.set_allocator(allocator);
  RegisterTestKernels(ctx, probe);
  RegisterStash(ctx, log);
  RuntimeSession session(StashModel());
  session.Run(ctx, Feed());
  auto events = ctx.events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].action == RuntimeEventAction::kPersistentStorage);
  CHECK(events[0].node_name == "stash");
  CHECK(events[0].storage_allocated_bytes == 128);
  CHECK(events[1].action == RuntimeEventAction::kKernel);
  CHECK(events[1].node_name == "stash");
  CHECK(events[1].op_type == "Stash");
  CHECK(events[2].node_name == "step");
  // The allocator's live and peak bytes after each node: Stash allocates nothing (it
  // forwards x), Step allocates its 2-float output.
  CHECK(events[1].allocated_bytes == 0);
  CHECK(events[2].allocated_bytes == 8);
  CHECK(events[2].peak_bytes == 8);
  // A child records into the same log, and clearing from a child clears it for all.
  RuntimeContext child = ctx.MakeChild();
  child.RecordEvent(RuntimeEvent{.action = RuntimeEventAction::kFunction, .node_name = "c"});
  CHECK(ctx.events().size() == 4);
  child.ClearEvents();
  CHECK(ctx.events().empty());
  // An independently constructed context keeps its own log.
  RuntimeContext other(KernelContext(18), RuntimeContextOptions{.events_enabled = true});
  other.RecordEvent(RuntimeEvent{});
  CHECK(other.events().size() == 1);
  CHECK(ctx.events().empty());

  RuntimeContext quiet;
  RegisterTestKernels(quiet, probe);
  RegisterStash(quiet, log);
  session.Run(quiet, Feed());
  quiet.RecordEvent(RuntimeEvent{});
  CHECK(quiet.events().empty());
}
