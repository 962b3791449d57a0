// A generation driven by `co_await state.AsyncRun(...)` from an asio coroutine, in a project
// that knows onnx-light only through its installed package (find_package). Greedy decoding of
// a character-level toy decoder whose cache is fed back through persistent_bindings; the
// tokens must equal what Generate() gives for the same prompt. Exits 0 when they do.
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "onnx_light.pb.h"
#include "state/async_state.h"

namespace {

using namespace onnx_light::core::runtime;
using onnx_light::core::DataType;

constexpr int64_t kVocab = 95;  // token t is the character 32 + t
constexpr int kNewTokens = 10;

// logits = table[token] + sin(sum(every token so far) * w): the retained cache decides.
std::shared_ptr<const onnx_light::ModelProto> BuildModel() {
  std::string table, w;
  for (int64_t i = 0; i < kVocab; ++i) {
    for (int64_t j = 0; j < kVocab; ++j)
      table += std::to_string(static_cast<double>((i * 7919 + j * 104729) % 1000) / 1000.0) +
               (i + 1 == kVocab && j + 1 == kVocab ? "" : ", ");
    w += std::to_string(0.05 + 0.011 * static_cast<double>(i)) + (i + 1 == kVocab ? "" : ", ");
  }
  const std::string v = std::to_string(kVocab);
  auto model = std::make_shared<onnx_light::ModelProto>(onnx_light::core::ParseModel(
      "<ir_version: 10, opset_import: [\"\" : 18]>"
      "chars (int64[B, S] input_ids, float[B, P] past) => (float[B, S, " +
      v +
      "] logits,"
      " float[B, Q] present)"
      "<float[" +
      v + ", " + v + "] table = {" + table + "}, float[" + v + "] w = {" + w +
      "},"
      " int64[1] axis1 = {1}, int64[1] axis2 = {2}>"
      "{ f = Cast<to = 1>(input_ids)  present = Concat<axis = 1>(past, f)"
      "  s = ReduceSum<keepdims = 1>(present, axis1)  s3 = Unsqueeze(s, axis2)"
      "  sw = Mul(s3, w)  phase = Sin(sw)  g = Gather<axis = 0>(table, input_ids)"
      "  logits = Add(g, phase) }"));
  auto* binding = model->mutable_graph()->add_persistent_bindings();
  binding->set_input_name("past");
  binding->set_output_name("present");
  return model;
}

RuntimeValue Ids(const std::vector<int64_t>& ids) {
  return RuntimeValue(Tensor::FromInt64("input_ids", {1, static_cast<int64_t>(ids.size())}, ids));
}

int64_t ArgmaxOfLastRow(const Tensor& logits) {
  const std::vector<float> all = logits.ToFloatVector();
  const auto last = all.end() - kVocab;
  return std::max_element(last, all.end()) - last;
}

// [doc: consumer generation]
asio::awaitable<std::vector<int64_t>> GenerateGreedy(
    std::shared_ptr<const onnx_light::ModelProto> model, RuntimeContext& context,
    std::vector<int64_t> prompt) {
  RuntimeValueMap initial;
  initial.emplace("past", RuntimeValue(Tensor("past", DataType::kFloat, {1, 0})));
  PersistentValueState state(*model, std::move(initial));
  std::vector<int64_t> generated;
  std::vector<int64_t> next = std::move(prompt);
  for (int i = 0; i < kNewTokens; ++i) {
    RuntimeValueMap feeds;
    feeds.emplace("input_ids", Ids(next));
    RuntimeValueMap out = co_await state.AsyncRun(context, std::move(feeds), asio::use_awaitable);
    generated.push_back(ArgmaxOfLastRow(out.at("logits").tensor()));
    next = {generated.back()};
  }
  co_return generated;
}
// [doc: consumer generation end]

}  // namespace

int main() {
  const auto model = BuildModel();
  RuntimeContext context(KernelContext(18));
  const std::string prompt = "Hello";
  std::vector<int64_t> ids;
  for (char c : prompt) ids.push_back(static_cast<int64_t>(c) - 32);

  std::vector<int64_t> tokens;
  asio::io_context io;
  asio::co_spawn(io, GenerateGreedy(model, context, ids),
                 [&](std::exception_ptr error, std::vector<int64_t> result) {
                   if (error) std::rethrow_exception(error);
                   tokens = std::move(result);
                 });
  io.run();

  RuntimeValueMap feeds;
  feeds.emplace("input_ids", Ids(ids));
  feeds.emplace("past", RuntimeValue(Tensor("past", DataType::kFloat, {1, 0})));
  GenerationOptions options;
  options.max_new_tokens = kNewTokens;
  const std::vector<int64_t> direct =
      Generate(model, context, std::move(feeds), options).ToInt64Vector();
  const std::vector<int64_t> expected(direct.begin() + static_cast<long>(ids.size()), direct.end());
  std::string text;
  for (int64_t t : tokens) text += static_cast<char>(32 + t);
  std::printf("\"%s\" -> \"%s\" (%zu tokens, same as Generate: %s)\n", prompt.c_str(), text.c_str(),
              tokens.size(), tokens == expected ? "yes" : "NO");
  return tokens == expected ? 0 : 1;
}
