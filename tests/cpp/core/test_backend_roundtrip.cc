// Every model of the onnx package's backend node test data must parse into onnx-light's
// schema, survive re-serialization, and pass CheckModel.
#include <doctest/doctest.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/checker.h"
#include "core/error.h"
#include "core/model_io.h"
#include "onnx_light.pb.h"

namespace fs = std::filesystem;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

namespace {

// Prints the directory holding <case>/model.onnx for every backend node test. Recent onnx
// wheels ship without the node data; it is then generated from the package's own node test
// cases (onnx.backend.test.case.node, the source of that data) into `cache`, once per onnx
// version.
constexpr const char* kLocateScript = R"py(
import os, sys, warnings
import onnx
node_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
if os.path.isdir(node_dir) and os.listdir(node_dir):
    print(node_dir)
    sys.exit(0)
out = sys.argv[1]
stamp = os.path.join(out, "generated-onnx-" + onnx.__version__)
if not os.path.exists(stamp):
    warnings.simplefilter("ignore")
    from onnx.backend.test.case import node
    for case in node.collect_testcases(None):
        case_dir = os.path.join(out, case.name)
        os.makedirs(case_dir, exist_ok=True)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
    open(stamp, "w").close()
print(out)
)py";

std::string Run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe.get())) out.append(buf, n);
  return out;
}

fs::path NodeTestDataDir() {
  const fs::path python = fs::path(ONNX_LIGHT_SOURCE_DIR) / ".venv" / "bin" / "python";
  REQUIRE_MESSAGE(fs::exists(python), "no Python at " << python << " (run dev.sh first)");
  const fs::path cache = fs::path(ONNX_LIGHT_BINARY_DIR) / "onnx_backend_node_data";
  fs::create_directories(cache);
  const fs::path script = cache / "locate.py";
  std::ofstream(script) << kLocateScript;
  std::string out =
      Run(python.string() + " " + script.string() + " " + cache.string() + " 2>/dev/null");
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  out = out.substr(out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1);
  REQUIRE_MESSAGE(!out.empty(), "the onnx package was not found by " << python);
  REQUIRE_MESSAGE(fs::is_directory(out), "no backend node test data at " << out);
  return out;
}

// True when `bytes` lists fields in increasing field-number order at every nesting level
// and packs packed repeated fields: the order protobuf serializers produce, so
// re-serialization must reproduce such bytes exactly.
bool IsCanonical(const std::string& bytes, const Descriptor* type) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetRecursionLimit(1000);
  int last = 0;
  while (uint32_t tag = in.ReadTag()) {
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    if (number < last) return false;
    last = number;
    const FieldDescriptor* field = type->FindFieldByNumber(number);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field != nullptr && field->is_packed() && wire != WireFormatLite::WIRETYPE_LENGTH_DELIMITED)
      return false;
    switch (wire) {
      case WireFormatLite::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in.ReadVarint64(&v)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED64: {
        uint64_t v;
        if (!in.ReadLittleEndian64(&v)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_FIXED32: {
        uint32_t v;
        if (!in.ReadLittleEndian32(&v)) return false;
        break;
      }
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t length;
        std::string payload;
        if (!in.ReadVarint32(&length) || !in.ReadString(&payload, static_cast<int>(length)))
          return false;
        if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE &&
            !IsCanonical(payload, field->message_type()))
          return false;
        break;
      }
      default:
        return false;  // groups are never written by ONNX tools
    }
  }
  return in.ConsumedEntireMessage();
}

}  // namespace

TEST_CASE("Every onnx backend node test model round-trips and passes the checker") {
  const fs::path root = NodeTestDataDir();
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(root))
    if (fs::is_regular_file(entry.path() / "model.onnx")) models.push_back(entry.path());
  std::sort(models.begin(), models.end());
  MESSAGE("backend node test models found in " << root.string() << ": " << models.size());
  REQUIRE(models.size() > 1000);

  size_t parsed = 0, equal_after_roundtrip = 0, canonical = 0, canonical_identical = 0;
  size_t checked = 0;
  std::vector<std::string> check_failures;
  // MessageDifferencer::Equals semantics, except that a NaN equals itself (tree-ensemble
  // models store NaN thresholds).
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  for (const auto& dir : models) {
    const std::string name = dir.filename().string();
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    const std::string original{std::istreambuf_iterator<char>(in), {}};
    onnx_light::ModelProto model;
    if (!model.ParseFromString(original)) {
      FAIL_CHECK(name << ": does not parse as onnx_light::ModelProto");
      continue;
    }
    ++parsed;
    const std::string bytes = onnx_light::core::SerializeModel(model);
    onnx_light::ModelProto reparsed;
    REQUIRE(reparsed.ParseFromString(bytes));
    if (differencer.Compare(model, reparsed))
      ++equal_after_roundtrip;
    else
      FAIL_CHECK(name << ": re-parsed model differs from the original");
    CHECK_MESSAGE(model.unknown_fields().empty(), name << ": has fields unknown to the schema");
    if (IsCanonical(original, onnx_light::ModelProto::descriptor())) {
      ++canonical;
      if (bytes == original)
        ++canonical_identical;
      else
        FAIL_CHECK(name << ": canonical bytes changed by re-serialization");
    }
    try {
      onnx_light::core::CheckModel(model);
      ++checked;
    } catch (const onnx_light::core::Error& e) {
      check_failures.push_back(name + ": " + e.what());
    }
  }
  MESSAGE("parsed " << parsed << "/" << models.size() << ", equal after round trip "
                    << equal_after_roundtrip << ", canonical field order " << canonical
                    << " (byte-identical after re-serialization: " << canonical_identical
                    << "), CheckModel passed " << checked << "/" << models.size());
  for (const auto& f : check_failures) FAIL_CHECK("CheckModel rejected " << f);
  CHECK(parsed == models.size());
  CHECK(equal_after_roundtrip == models.size());
  CHECK(canonical_identical == canonical);
  CHECK(checked == models.size());
}
