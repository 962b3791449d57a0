// The C++ feedback loop of docs/persistent-state.md, run by CTest. Exits non-zero when a
// result differs from the documented one.
#include <cstdio>
#include <utility>
#include <vector>

#include "core/text_parser.h"
#include "state/persistent_value_state.h"

int main() {
  onnx_light::ModelProto model = onnx_light::core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>\n"
      "accumulate (float[2] delta, float[2] past) => (float[2] present)\n"
      "{ present = Add(delta, past) }");

  // [doc: basic loop]
  using namespace onnx_light::core::runtime;

  auto* binding = model.mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  PersistentValueState state(model,
                             {{"past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f}))}});
  RuntimeContext context(KernelContext(18));
  auto outputs =
      state.Run(context, {{"delta", RuntimeValue(Tensor::FromFloat("delta", {2}, {1.f, 1.f}))}});
  // [doc: basic loop end]
  outputs =
      state.Run(context, {{"delta", RuntimeValue(Tensor::FromFloat("delta", {2}, {1.f, 1.f}))}});
  const std::vector<float> present = outputs.at("present").tensor().ToFloatVector();
  const std::vector<float> retained = state.Values().at("past").tensor().ToFloatVector();
  // The retained value is the returned output's buffer: no payload copy.
  const bool shared =
      state.Values().at("past").tensor().raw_data() == outputs.at("present").tensor().raw_data();
  // [doc: reset and close]
  state.Reset({{"past", RuntimeValue(Tensor::FromFloat("past", {2}, {0.f, 0.f}))}});
  state.Close();
  // [doc: reset and close end]

  // Zero-copy initial values: move an owned map in.
  RuntimeValueMap initial;
  initial["past"] = RuntimeValue(Tensor::FromFloat("past", {2}, {10.f, 20.f}));
  const void* initial_bytes = initial.at("past").tensor().raw_data();
  PersistentValueState second(model, std::move(initial));
  const bool moved = second.Values().at("past").tensor().raw_data() == initial_bytes;

  std::printf("present = [%g, %g], retained = [%g, %g], shared = %d, moved = %d\n", present[0],
              present[1], retained[0], retained[1], shared, moved);
  const bool ok = present == std::vector<float>{2.f, 2.f} &&
                  retained == std::vector<float>{2.f, 2.f} && shared && moved;
  return ok ? 0 : 1;
}
