// One compiled model shared by every caller: SessionCache gives one session per model
// object (never by hashing or serialising it) and lets go of models no one holds; a session
// shares one plan between equivalent contexts and drops plans no context can reach; runs
// return only the outputs asked for.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "core/text_parser.h"
#include "executor/runtime_session.h"
#include "executor/session_cache.h"
#include "onnx_light.pb.h"

using namespace onnx_light;
using namespace onnx_light::core::runtime;
using onnx_light::core::ErrorCode;

namespace {

std::shared_ptr<const ModelProto> AddModel() {
  return std::make_shared<ModelProto>(
      core::ParseModel("<ir_version: 10, opset_import: [\"\" : 18]>"
                       "add (float[2] x) => (float[2] y, float[2] z)"
                       "<float[2] one = {1.0, 1.0}>"
                       "{ y = Add(x, one)  z = Mul(x, one) }"));
}

RuntimeValueMap Feeds(float a, float b) {
  RuntimeValueMap feeds;
  feeds.emplace("x", RuntimeValue(Tensor::FromFloat("x", {2}, {a, b})));
  return feeds;
}

}  // namespace

TEST_CASE("the cache gives one session per model object and options and never one per equal copy") {
  SessionCache cache;
  auto model = AddModel();
  auto first = cache.Get(model);
  CHECK(cache.Get(model) == first);  // the same object: the same compiled session
  CHECK(cache.size() == 1);
  // An equal model is another object: the cache never compares contents.
  auto copy = std::make_shared<const ModelProto>(*model);
  CHECK(cache.Get(copy) != first);
  // Options are part of the key; a new version of the same object gets a new session.
  CHECK(cache.Get(model, {.intra_op_threads = 1}) != first);
  CHECK(cache.Get(model, {.fold_constants = false}) != first);
  auto v1 = cache.Get(model, {}, 1);
  CHECK(v1 != first);
  CHECK(cache.Get(model, {}, 1) == v1);
  CHECK(&first->model() == model.get());  // the session reads the caller's model in place
}

TEST_CASE("a cached session keeps its model only while someone outside the cache holds either") {
  SessionCache cache;
  auto model = AddModel();
  std::weak_ptr<const ModelProto> watch = model;
  auto session = cache.Get(model);
  model.reset();
  CHECK_FALSE(watch.expired());  // the session someone holds needs its model
  CHECK(cache.Sweep() == 0);
  session.reset();
  CHECK_FALSE(watch.expired());  // only the cache holds it now ...
  CHECK(cache.Sweep() == 1);     // ... and lets go at the next lookup or sweep
  CHECK(watch.expired());
  CHECK(cache.size() == 0);

  // Every lookup sweeps first: a model dropped by its caller does not outlive the next call.
  auto a = AddModel();
  std::weak_ptr<const ModelProto> watch_a = a;
  cache.Get(a);
  a.reset();
  auto b = AddModel();
  cache.Get(b);
  CHECK(watch_a.expired());
  CHECK(cache.size() == 1);
}

TEST_CASE("the cache holds at most its capacity and drops the least recently used first") {
  SessionCache cache(2);
  auto a = AddModel(), b = AddModel(), c = AddModel();
  auto sa = cache.Get(a);
  cache.Get(b);
  CHECK(cache.Get(a) == sa);  // a is now the most recently used
  cache.Get(c);               // b goes
  CHECK(cache.size() == 2);
  CHECK(cache.Get(a) == sa);
  cache.set_capacity(0);  // nothing cached: every lookup compiles
  CHECK(cache.size() == 0);
  CHECK(cache.Get(a) != sa);
  CHECK(cache.size() == 0);
  // A session handed out stays valid after the cache let go of it.
  RuntimeContext context;
  CHECK(sa->Run(context, Feeds(1, 2)).at("y").tensor().ToFloatVector() == std::vector<float>{2, 3});
  cache.set_capacity(4);
  cache.Get(a);
  cache.Clear();
  CHECK(cache.size() == 0);
}

TEST_CASE("a model without an owner gets a private session that is never cached") {
  SessionCache cache;
  const ModelProto model = *AddModel();
  std::shared_ptr<const ModelProto> alias(std::shared_ptr<const ModelProto>(), &model);
  auto s1 = cache.Get(alias);
  auto s2 = cache.Get(alias);
  CHECK(s1 != s2);
  CHECK(cache.size() == 0);
}

TEST_CASE(
    "equivalent contexts share one plan while custom kernels and other opsets get their own") {
  auto session = std::make_shared<RuntimeSession>(AddModel());
  RuntimeContext a, b;
  const GraphPlan& plan = session->plan(a);
  CHECK(&session->plan(b) == &plan);
  CHECK(session->plan_count() == 1);
  {
    RuntimeContext per_call;  // a new context per call does not re-plan
    CHECK(&session->plan(per_call) == &plan);
    CHECK(session->Run(per_call, Feeds(1, 2)).at("y").tensor().ToFloatVector() ==
          std::vector<float>{2, 3});
  }
  RuntimeContext other_opset(KernelContext(17));
  CHECK(&session->plan(other_opset) != &plan);
  RuntimeContext custom;
  custom.RegisterKernelFn("test", "Nothing", core::symbolic::Device::kCPU,
                          [](const NodeProto&, RuntimeContext&,
                             const KernelInfo&) -> std::unique_ptr<KernelBase> { return nullptr; });
  CHECK(&session->plan(custom) != &plan);
  CHECK(session->plan_count() == 3);
}

TEST_CASE("a session forgets the contexts of earlier calls when a new context joins its plan") {
  // A server's context per request: each joins the shared plan; the gone ones must not stay
  // in the plan's user list (it grew by one configuration per call, kept alive for good).
  auto session = std::make_shared<RuntimeSession>(AddModel());
  RuntimeContext builder;
  const GraphPlan& plan = session->plan(builder);
  std::weak_ptr<const void> first_call;
  {
    RuntimeContext per_call;
    first_call = per_call.config_keepalive();
    CHECK(&session->plan(per_call) == &plan);
  }
  CHECK_FALSE(first_call.expired());  // forgotten when the next context joins
  RuntimeContext next_call;
  CHECK(session->Run(next_call, Feeds(1, 2)).at("y").tensor().ToFloatVector() ==
        std::vector<float>{2, 3});
  CHECK(first_call.expired());
  CHECK(session->plan_count() == 1);
}

TEST_CASE("a plan no context can reach any more is dropped when another plan is built") {
  auto session = std::make_shared<RuntimeSession>(AddModel());
  RuntimeContext keep;
  session->plan(keep);
  {
    RuntimeContext gone(KernelContext(17));
    session->plan(gone);
    CHECK(session->plan_count() == 2);
  }
  CHECK(session->plan_count() == 2);  // nothing is dropped until a plan is built
  RuntimeContext next(KernelContext(16));
  session->plan(next);
  CHECK(session->plan_count() == 2);  // keep's and next's
  CHECK(session->Run(keep, Feeds(1, 2)).at("y").tensor().ToFloatVector() ==
        std::vector<float>{2, 3});
}

TEST_CASE("a session run returns only the outputs asked for and names unknown ones") {
  const auto session = std::make_shared<const RuntimeSession>(AddModel());
  RuntimeContext context;
  auto out = session->Run(context, Feeds(1, 2), std::vector<std::string>{"z"});
  CHECK(out.size() == 1);
  CHECK(out.at("z").tensor().ToFloatVector() == std::vector<float>{1, 2});
  CHECK(session->Run(context, Feeds(1, 2), std::vector<std::string>{}).empty());
  test_util::ExpectError(
      [&] {
        session->Run(context, Feeds(1, 2), std::vector<std::string>{"y", "w", "v"});
      },
      ErrorCode::kInvalidArgument,
      {"unknown output name(s) 'v', 'w'", "the graph outputs are 'y', 'z'"});
}

TEST_CASE("attachments are made once per session and shared") {
  const RuntimeSession session(AddModel());
  static const char key = 0;
  int made = 0;
  auto make = [&]() -> std::shared_ptr<const void> {
    ++made;
    return std::make_shared<int>(7);
  };
  auto first = session.Attachment(&key, make);
  CHECK(session.Attachment(&key, make) == first);
  CHECK(made == 1);
  static const char failing = 0;
  CHECK_THROWS(session.Attachment(
      &failing, []() -> std::shared_ptr<const void> { throw std::runtime_error("no"); }));
  CHECK(session.Attachment(&failing, make) != nullptr);  // a throwing make stored nothing
}
