#include <doctest/doctest.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model_io.h"
#include "core/tensor_proto.h"
#include "onnx_light.pb.h"

using onnx_light::ModelProto;
using onnx_light::TensorProto;
using onnx_light::core::Error;
using onnx_light::core::ErrorCode;
using onnx_light::core::LoadModel;
using onnx_light::core::LoadModelFromBytes;
using onnx_light::core::ModelBaseDir;
using onnx_light::core::ModelSerializationCount;
using onnx_light::core::SaveModel;
using onnx_light::core::SerializeModel;
using onnx_light::core::runtime::MappedFile;
using onnx_light::core::runtime::Tensor;
using onnx_light::core::runtime::TensorFromProto;

namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "onnx_light_io_XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
};

ModelProto SmallModel() {
  ModelProto model;
  REQUIRE(google::protobuf::TextFormat::ParseFromString(
      R"pb(ir_version: 10
           opset_import { domain: "" version: 18 }
           producer_name: "test"
           graph {
             name: "main"
             node { op_type: "Add" input: "delta" input: "past" output: "present" }
             input {
               name: "delta"
               type {
                 tensor_type {
                   elem_type: 1
                   shape { dim { dim_value: 2 } }
                 }
               }
             }
             input {
               name: "past"
               type {
                 tensor_type {
                   elem_type: 1
                   shape { dim { dim_param: "n" } }
                 }
               }
             }
             output {
               name: "present"
               type { tensor_type { elem_type: 1 } }
             }
             initializer { name: "w" data_type: 1 dims: 2 raw_data: "\000\000\200?\000\000\000@" }
             persistent_bindings { input_name: "past" output_name: "present" }
           })pb",
      &model));
  return model;
}

// Adds an external FLOAT initializer of `count` elements at `offset` in `location`.
void AddExternal(ModelProto& model, const std::string& name, const std::string& location,
                 int64_t offset, int64_t count) {
  TensorProto* t = model.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  t->add_dims(count);
  t->set_data_location(TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value(location);
  e = t->add_external_data();
  e->set_key("offset");
  e->set_value(std::to_string(offset));
  e = t->add_external_data();
  e->set_key("length");
  e->set_value(std::to_string(count * 4));
}

// The pathname of the /proc/self/maps line whose address range contains `p` ("" if none,
// "[anon]" for an anonymous mapping such as the heap's).
std::string MappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr < lo || addr >= hi) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    return path.empty() ? "[anon]" : path;
  }
  return "";
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("A model survives serialize/parse and save/load unchanged, counting serializations") {
  const ModelProto model = SmallModel();
  const uint64_t before = ModelSerializationCount();
  const std::string bytes = SerializeModel(model);
  CHECK(ModelSerializationCount() == before + 1);
  auto parsed = LoadModelFromBytes(bytes);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*parsed, model));
  CHECK(parsed->graph().persistent_bindings(0).output_name() == "present");
  CHECK(ModelBaseDir(*parsed).empty());

  TempDir dir;
  const std::string path = (dir.path / "model.onnx").string();
  SaveModel(model, path);
  CHECK(ModelSerializationCount() == before + 2);
  CHECK(fs::file_size(path) == bytes.size());
  auto loaded = LoadModel(path);
  CHECK(ModelSerializationCount() == before + 2);  // loading never serializes
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*loaded, model));
  CHECK(ModelBaseDir(*loaded) == fs::absolute(dir.path).string());
}

TEST_CASE("Malformed bytes, missing files and 2 GB models fail with clear errors") {
  CHECK_THROWS_WITH_AS(LoadModelFromBytes("\xff\xff\xff"),
                       "model bytes is not a valid binary ModelProto", Error);
  try {
    LoadModel("/nonexistent/model.onnx");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("cannot open model file '/nonexistent/model.onnx'") == 0);
  }
  // A directory and a character device are refused by name before any read (a directory
  // would otherwise report a size of 2^63 - 1 bytes, /dev/zero would never end).
  CHECK_THROWS_WITH_AS(LoadModel("/tmp"),
                       "model file '/tmp' is a directory: pass the .onnx file in it", Error);
  CHECK_THROWS_WITH_AS(LoadModel("/dev/zero"), "model file '/dev/zero' is not a regular file",
                       Error);
  // Reserve (not commit) 2 GB of address space so the view is valid without touching memory.
  const size_t huge = static_cast<size_t>(INT_MAX) + 1;
  void* p = mmap(nullptr, huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  try {
    LoadModelFromBytes(std::string_view(static_cast<const char*>(p), huge));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) ==
          "model bytes is 2147483648 bytes: protobuf models of 2 GB or more are not supported "
          "(store the weights as external data)");
  }
  munmap(p, huge);
}

TEST_CASE("External initializers are memory-mapped, one mapping per file, not read to the heap") {
  TempDir dir;
  // 64 bytes of padding, then w1 = {1, 2, 3, 4}, then w2 = {5, 6} at offset 80.
  std::vector<float> payload(16 + 4 + 2, 0.f);
  for (int i = 0; i < 4; ++i) payload[16 + i] = static_cast<float>(i + 1);
  payload[20] = 5.f;
  payload[21] = 6.f;
  {
    std::ofstream out(dir.path / "weights.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(payload.data()),
              static_cast<std::streamsize>(payload.size() * sizeof(float)));
  }
  ModelProto model = SmallModel();
  AddExternal(model, "w1", "weights.bin", 64, 4);
  AddExternal(model, "w2", "weights.bin", 80, 2);
  const std::string path = (dir.path / "model.onnx").string();
  SaveModel(model, path);

  auto loaded = LoadModel(path);
  const std::string base = ModelBaseDir(*loaded);
  Tensor w1 = TensorFromProto(loaded->graph().initializer(1), loaded, base);
  Tensor w2 = TensorFromProto(loaded->graph().initializer(2), loaded, base);
  CHECK(w1.ToFloatVector() == std::vector<float>{1, 2, 3, 4});
  CHECK(w2.ToFloatVector() == std::vector<float>{5, 6});
  CHECK_FALSE(w1.writable());

  // Both tensors are owned by the one live mapping of the file, at the right offsets.
  auto mapping = MappedFile::Open((dir.path / "weights.bin").string());
  CHECK(w1.owner().get() == mapping.get());
  CHECK(w2.owner().get() == mapping.get());
  CHECK(w1.raw_data() == mapping->data() + 64);
  CHECK(w2.raw_data() == mapping->data() + 80);
  CHECK(mapping->size() == payload.size() * sizeof(float));
  // The kernel agrees: the bytes lie in a file mapping of weights.bin, not the heap.
  CHECK(MappingOf(w1.raw_data()) == fs::canonical(dir.path / "weights.bin").string());
  CHECK(MappingOf(w2.raw_data()) == fs::canonical(dir.path / "weights.bin").string());

  // The mapping outlives the model and the file's name: tensors keep it alive.
  const void* data = w1.raw_data();
  mapping.reset();
  loaded.reset();
  fs::remove(dir.path / "weights.bin");
  CHECK(w1.raw_data() == data);
  CHECK(w1.ToFloatVector() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("External data locations escaping the model directory are rejected") {
  TempDir dir;
  fs::create_directory(dir.path / "sub");
  {
    std::ofstream out(dir.path / "outside.bin", std::ios::binary);
    out << std::string(16, '\0');
  }
  const std::string path = (dir.path / "sub" / "model.onnx").string();

  ModelProto dotdot = SmallModel();
  AddExternal(dotdot, "w", "../outside.bin", 0, 4);
  SaveModel(dotdot, path);
  CHECK(ErrorOf([&] { LoadModel(path); }) ==
        "tensor 'w': external data location '../outside.bin' escapes the model's directory "
        "('..' is not allowed)");
  CHECK(ErrorOf([&] {
          TensorFromProto(dotdot.graph().initializer(1), nullptr, (dir.path / "sub").string());
        }).find("escapes the model's directory") != std::string::npos);

  ModelProto absolute = SmallModel();
  AddExternal(absolute, "w", (dir.path / "outside.bin").string(), 0, 4);
  SaveModel(absolute, path);
  CHECK(ErrorOf([&] { LoadModel(path); }).find("is an absolute path") != std::string::npos);

  ModelProto nested = SmallModel();
  AddExternal(nested, "w", "a/../../outside.bin", 0, 4);
  SaveModel(nested, path);
  CHECK(ErrorOf([&] { LoadModel(path); }).find("escapes") != std::string::npos);
}

TEST_CASE("External data ranges are checked against the file size") {
  TempDir dir;
  {
    std::ofstream out(dir.path / "w.bin", std::ios::binary);
    out << std::string(16, '\0');
  }
  const std::string path = (dir.path / "model.onnx").string();
  ModelProto model = SmallModel();
  AddExternal(model, "w", "w.bin", 8, 4);  // bytes [8, 24) of a 16-byte file
  SaveModel(model, path);
  CHECK(ErrorOf([&] { LoadModel(path); }) ==
        "tensor 'w': external data [8, 24) lies past the end of '" +
            (fs::absolute(dir.path) / "w.bin").string() + "' (16 bytes)");
  CHECK(ErrorOf([&] {
          TensorFromProto(model.graph().initializer(1), nullptr, dir.path.string());
        }).find("lies past the end") != std::string::npos);
  // A model from bytes has no directory to resolve external data against.
  CHECK(ErrorOf([&] {
          TensorFromProto(model.graph().initializer(1));
        }).find("needs the model's directory") != std::string::npos);
}

TEST_CASE("Misaligned external tensors are copied to aligned storage, strings are refused") {
  TempDir dir;
  std::vector<uint8_t> bytes(2 + 8, 0);
  const float values[2] = {1.5f, -2.f};
  std::memcpy(bytes.data() + 2, values, 8);  // floats at offset 2: not 4-byte aligned
  {
    std::ofstream out(dir.path / "w.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), 10);
  }
  ModelProto model = SmallModel();
  AddExternal(model, "w", "w.bin", 2, 2);
  Tensor w = TensorFromProto(model.graph().initializer(1), nullptr, dir.path.string());
  CHECK(w.ToFloatVector() == std::vector<float>{1.5f, -2.f});
  CHECK(reinterpret_cast<uintptr_t>(w.raw_data()) % alignof(float) == 0);
  CHECK(MappingOf(w.raw_data()) != fs::canonical(dir.path / "w.bin").string());

  TensorProto strings = model.graph().initializer(1);
  strings.set_data_type(TensorProto::STRING);
  try {
    TensorFromProto(strings, nullptr, dir.path.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotImplemented);
    CHECK(std::string(e.what()) == "tensor 'w': external STRING data is not supported");
  }
}
