// Feeds into PersistentValueState: values decoded from the fuzzer's bytes (tensors of any
// dtype/shape, borrowed and strided views, structs, sequences, encoded values, empties, nested)
// as initial values, Reset values and feeds of small models with persistent bindings:
//   0: past/present float[2] (Add), 1: a sequence of float[N] (SequenceInsert),
//   2: a struct {k: float[N], n: int64[]} (Identity), 3: a layout-less paged cache (Identity).
// Input: [u8 model][u8 ops] then values in the order the ops consume them.
#include <cstddef>
#include <cstdint>

#include "core/text_parser.h"
#include "executor/runtime_context.h"
#include "executor/runtime_session.h"
#include "fuzz_util.h"
#include "shared_context.h"
#include "state/persistent_value_state.h"

using namespace fuzz;

namespace {

void Bind(ModelProto& m, const char* in, const char* out) {
  auto* b = m.mutable_graph()->add_persistent_bindings();
  b->set_input_name(in);
  b->set_output_name(out);
}

std::shared_ptr<const ModelProto> Parse(const char* text, bool with_y = true) {
  auto m = std::make_shared<ModelProto>(
      ParseModel(std::string("<ir_version: 10, opset_import: [\"\" : 18]>") + text));
  (void)with_y;
  Bind(*m, "past", "present");
  return m;
}

std::shared_ptr<const ModelProto> StructModel(bool paged) {
  auto m = std::make_shared<ModelProto>();
  m->set_ir_version(10);
  m->add_opset_import()->set_version(18);
  auto* s = m->add_struct_types();
  s->set_name("kv");
  if (!paged) {
    auto* k = s->add_field();
    k->set_name("k");
    auto* kt = k->mutable_type()->mutable_tensor_type();
    kt->set_elem_type(1);
    kt->mutable_shape()->add_dim()->set_dim_param("N");
    auto* n = s->add_field();
    n->set_name("n");
    n->mutable_type()->mutable_tensor_type()->set_elem_type(7);
    n->mutable_type()->mutable_tensor_type()->mutable_shape();
  }
  GraphProto* g = m->mutable_graph();
  g->set_name("s");
  auto* in = g->add_input();
  in->set_name("past");
  in->mutable_type()->mutable_struct_type()->set_type_ref("kv");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  auto* out = g->add_output();
  out->set_name("present");
  out->mutable_type()->mutable_struct_type()->set_type_ref("kv");
  auto* y = g->add_output();
  y->set_name("y");
  auto* node = g->add_node();
  node->set_op_type("Identity");
  node->add_input("past");
  node->add_output("present");
  auto* node2 = g->add_node();
  node2->set_op_type("Identity");
  node2->add_input("x");
  node2->add_output("y");
  Bind(*m, "past", "present");
  return m;
}

std::shared_ptr<const RuntimeSession> Session(const std::shared_ptr<const ModelProto>& model) {
  RuntimeSessionOptions options;
  options.intra_op_threads = 1;
  options.max_tensor_bytes = kStateMaxTensorBytes;
  return std::make_shared<RuntimeSession>(model, options);
}

// One session per model, shared by the states of all inputs (as a server shares it).
const std::shared_ptr<const RuntimeSession>& Model(int i) {
  static const std::shared_ptr<const RuntimeSession> models[] = {
      Session(Parse("g (float[2] x, float[2] past) => (float[2] y, float[2] present) "
                    "{ present = Add(x, past) y = Identity(present) }")),
      Session(Parse("g (float[N] x, seq(float[N]) past) => (int64 y, seq(float[N]) present) "
                    "{ present = SequenceInsert(past, x) y = SequenceLength(present) }")),
      Session(StructModel(false)), Session(StructModel(true))};
  return models[i % 4];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Values built outside a run (feeds, caches) obey the same limit as the runs.
  const ScopedMaxTensorBytes limit(kStateMaxTensorBytes);
  Reader r(data, size);
  const auto& session = Model(r.U8());
  const uint8_t ops = r.U8();
  std::unique_ptr<PersistentValueState> state;
  RuntimeValueMap initial;
  if (ops & 1) initial["past"] = ReadValue(r, 6);
  Expect([&] { state = std::make_unique<PersistentValueState>(session, initial); });
  if (!state)
    Expect([&] { state = std::make_unique<PersistentValueState>(session, RuntimeValueMap{}); });
  if (!state) return 0;
  RuntimeContext& context = SharedContext();
  for (int step = 0; step < 3 && r.left() > 0; ++step) {
    RuntimeValueMap feeds;
    feeds["x"] = ReadValue(r, 6);
    if (ops & (2 << step)) feeds["past"] = ReadValue(r, 4);  // a bound input fed directly
    Expect([&] { (void)state->Run(context, std::move(feeds)); });
    if (ops & (16 << step)) {
      RuntimeValueMap reset;
      reset["past"] = ReadValue(r, 6);
      Expect([&] { state->Reset(std::move(reset)); });
    }
  }
  Expect([&] { (void)state->Values(); });
  if (ops & 128) Expect([&] { state->Close(); });
  return 0;
}
