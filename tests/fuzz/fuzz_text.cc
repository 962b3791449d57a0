// The ONNX text parser and printer. First byte selects the target:
//   0-3: text -> ParseModel / ParseGraph / ParseFunction / ParseNode, then print the result
//        and parse the printed text again (it must parse: the printer's output is valid text);
//   4:   bytes -> ModelProto (binary) -> PrintModel (the printer on arbitrary protos).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/text_parser.h"
#include "core/text_printer.h"
#include "fuzz_util.h"

using namespace fuzz;

namespace {

template <typename Parse, typename Print>
void RoundTrip(std::string_view text, Parse parse, Print print) {
  std::string printed;
  try {
    auto proto = parse(text);
    printed = print(proto);
  } catch (const Error&) {
    return;
  }
  try {
    auto again = parse(printed);
    // Printing is a fixed point after one round trip.
    if (print(again) != printed) {
      std::fprintf(stderr, "printed text changes on a second round trip:\n%s\n---\n%s\n",
                   printed.c_str(), print(again).c_str());
      std::abort();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "printed text does not parse back: %s\n---\n%s\n", e.what(),
                 printed.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 5;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
      RoundTrip(rest, ParseModel, [](const ModelProto& m) { return PrintModel(m); });
      break;
    case 1:
      RoundTrip(rest, ParseGraph, [](const GraphProto& g) { return PrintGraph(g); });
      break;
    case 2:
      RoundTrip(rest, ParseFunction, [](const FunctionProto& f) { return PrintFunction(f); });
      break;
    case 3:
      RoundTrip(rest, ParseNode, [](const NodeProto& n) { return PrintNode(n); });
      break;
    default: {
      ModelProto model;
      if (!model.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) return 0;
      Expect([&] { (void)PrintModel(model); });
    }
  }
  return 0;
}
