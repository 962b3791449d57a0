// A TCP line-protocol generation service on loopback, run by CTest (docs/generation.md,
// "Serving many requests"). One io_context thread serves every connection with C++20
// coroutines; the generations run on the shared TBB arena through a RequestScheduler.
//
// Protocol: the client sends one prompt line (printable ASCII). The server answers one line
// per generated token, "token <id> <character>", as soon as the token is published, then
// "done <count>" (or "error <message>"), and closes.
//
// The program starts the server on an ephemeral port, connects three clients at once,
// checks that each receives exactly the tokens a direct Generate() gives for its prompt,
// prints them and exits 0 (1 on any mismatch).
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/text_parser.h"
#include "onnx_light.pb.h"
#include "state/request_scheduler.h"

namespace {

using asio::ip::tcp;
using onnx_light::ModelProto;
using namespace onnx_light::core::runtime;

constexpr int64_t kVocab = 95;  // token t is the character 32 + t
constexpr int64_t kNewTokens = 12;

// A character-level toy decoder with a bound cache: the next token's logits are
// table[token] + sin(sum(all tokens so far) * w), so the cache (every token so far, fed back
// through persistent_bindings) decides the continuation. Built here: no file, no network.
std::shared_ptr<const ModelProto> BuildModel() {
  std::string table, w;
  for (int64_t i = 0; i < kVocab; ++i) {
    for (int64_t j = 0; j < kVocab; ++j)
      table += std::to_string(static_cast<double>((i * 7919 + j * 104729) % 1000) / 1000.0) +
               (i + 1 == kVocab && j + 1 == kVocab ? "" : ", ");
    w += std::to_string(0.05 + 0.011 * static_cast<double>(i)) + (i + 1 == kVocab ? "" : ", ");
  }
  const std::string v = std::to_string(kVocab);
  auto model = std::make_shared<ModelProto>(onnx_light::core::ParseModel(
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

RuntimeValueMap Feeds(const std::string& prompt) {
  std::vector<int64_t> ids;
  for (char c : prompt) ids.push_back(static_cast<int64_t>(c) - 32);
  const int64_t length = static_cast<int64_t>(ids.size());
  RuntimeValueMap feeds;
  feeds.emplace("input_ids", RuntimeValue(Tensor::FromInt64("input_ids", {1, length}, ids)));
  feeds.emplace("past", RuntimeValue(Tensor("past", onnx_light::core::DataType::kFloat, {1, 0})));
  return feeds;
}

GenerationOptions Options() {
  GenerationOptions options;
  options.max_new_tokens = kNewTokens;
  return options;
}

// Lines travel from the arena workers (token callbacks) to the connection's coroutine.
using Lines = asio::experimental::concurrent_channel<void(asio::error_code, std::string)>;

// [doc: serve one connection]
asio::awaitable<void> Serve(tcp::socket socket, RequestScheduler& scheduler,
                            std::shared_ptr<const ModelProto> model) {
  auto executor = co_await asio::this_coro::executor;
  std::string input;
  const size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(input), '\n',
                                                   asio::use_awaitable);
  const std::string prompt = input.substr(0, n - 1);
  bool printable = !prompt.empty();
  for (char c : prompt) printable = printable && c >= 32 && c < 127;
  if (!printable) {
    const std::string reply = "error the prompt must be non-empty printable ASCII\n";
    co_await asio::async_write(socket, asio::buffer(reply), asio::use_awaitable);
    co_return;
  }

  auto lines = std::make_shared<Lines>(executor, kNewTokens + 1);
  GenerationRequest request;
  request.model = std::move(model);
  request.feeds = Feeds(prompt);
  request.options = Options();
  request.on_token = [lines](int64_t, const std::vector<int64_t>& tokens) {
    const char c = static_cast<char>(32 + tokens[0]);
    return lines->try_send(asio::error_code{},
                           "token " + std::to_string(tokens[0]) + " " + std::string(1, c));
  };
  // The result arrives on this connection's executor after its last token; a client that
  // goes away cancels its request through the completion's cancellation slot.
  auto cancel = std::make_shared<asio::cancellation_signal>();
  scheduler.AsyncSubmit(
      std::move(request),
      asio::bind_cancellation_slot(
          cancel->slot(), asio::bind_executor(executor, [lines, cancel](std::exception_ptr error,
                                                                        GenerationResult result) {
            std::string last = "done " + std::to_string(result.stats.tokens);
            if (error) {
              try {
                std::rethrow_exception(error);
              } catch (const std::exception& e) {
                last = std::string("error ") + e.what();
              }
            }
            lines->try_send(asio::error_code{}, std::move(last));
          })));
  for (;;) {
    std::string line = co_await lines->async_receive(asio::use_awaitable);
    const bool last = line.rfind("token ", 0) != 0;
    line += '\n';
    auto [ec, written] = co_await asio::async_write(
        socket, asio::buffer(line), asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) {
      cancel->emit(asio::cancellation_type::terminal);  // client gone: stop generating
      co_return;
    }
    if (last) co_return;
  }
}
// [doc: serve one connection end]

asio::awaitable<void> Accept(tcp::acceptor& acceptor, RequestScheduler& scheduler,
                             std::shared_ptr<const ModelProto> model, int connections) {
  for (int i = 0; i < connections; ++i) {
    tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), Serve(std::move(socket), scheduler, model),
                   [](std::exception_ptr e) {
                     if (e) std::rethrow_exception(e);
                   });
  }
}

struct ClientResult {
  std::vector<int64_t> tokens;
  std::string text;
  std::string last_line;
};

asio::awaitable<void> Client(unsigned short port, std::string prompt, ClientResult& out) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect({asio::ip::address_v4::loopback(), port}, asio::use_awaitable);
  const std::string request = prompt + "\n";
  co_await asio::async_write(socket, asio::buffer(request), asio::use_awaitable);
  std::string buffer;
  for (;;) {
    const size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), '\n',
                                                     asio::use_awaitable);
    const std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (line.rfind("token ", 0) != 0) {
      out.last_line = line;
      co_return;
    }
    const size_t space = line.find(' ', 6);
    out.tokens.push_back(std::stoll(line.substr(6, space - 6)));
    out.text += line.substr(space + 1);
  }
}

}  // namespace

int main() {
  auto model = BuildModel();
  RuntimeContext context(KernelContext(18));
  // Two requests in flight at once: with three clients, one waits for a slot.
  RequestScheduler scheduler(context, {.max_in_flight = 2});

  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::address_v4::loopback(), 0});
  const unsigned short port = acceptor.local_endpoint().port();
  const std::vector<std::string> prompts = {"Hello", "onnx-light", "KV cache"};
  std::vector<ClientResult> results(prompts.size());
  bool failed = false;
  asio::co_spawn(io, Accept(acceptor, scheduler, model, static_cast<int>(prompts.size())),
                 [&](std::exception_ptr e) { failed |= e != nullptr; });
  for (size_t i = 0; i < prompts.size(); ++i) {
    asio::co_spawn(io, Client(port, prompts[i], results[i]),
                   [&](std::exception_ptr e) { failed |= e != nullptr; });
  }
  io.run();  // returns once every client got its "done" line

  bool ok = !failed;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t> direct =
        Generate(model, context, Feeds(prompts[i]), Options()).ToInt64Vector();
    const std::vector<int64_t> expected(direct.begin() + static_cast<long>(prompts[i].size()),
                                        direct.end());
    const bool same = results[i].tokens == expected &&
                      results[i].last_line == "done " + std::to_string(kNewTokens);
    ok = ok && same;
    std::printf("client %zu: \"%s\" -> \"%s\" (%zu tokens, %s, same as Generate: %s)\n", i,
                prompts[i].c_str(), results[i].text.c_str(), results[i].tokens.size(),
                results[i].last_line.c_str(), same ? "yes" : "NO");
  }
  std::printf("peak requests in flight: %lld (bound %lld)\n",
              static_cast<long long>(scheduler.peak_in_flight()),
              static_cast<long long>(scheduler.options().max_in_flight));
  ok = ok && scheduler.peak_in_flight() <= 2;
  return ok ? 0 : 1;
}
