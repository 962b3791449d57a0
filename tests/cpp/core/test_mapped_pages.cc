// ReleaseMappedPages: drops a process's pages of a mapped weight (after a kernel copied it
// into a pack) without changing what a later read sees; any other memory is left alone.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/tensor_proto.h"

using onnx_light::core::runtime::MappedFile;
using onnx_light::core::runtime::ReleaseMappedPages;

TEST_CASE("released pages of a mapped file read back unchanged, heap memory is refused") {
  const std::string path = "/tmp/ol_mapped_pages_" + std::to_string(::getpid()) + ".bin";
  std::vector<float> values(64 * 1024);  // 256 KiB: many whole pages
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  {
    auto file = MappedFile::Open(path);
    const auto* mapped = reinterpret_cast<const float*>(file->data());
    double sum = 0;
    for (size_t i = 0; i < values.size(); ++i) sum += mapped[i];  // fault every page in
    CHECK(sum > 0);
    // An unaligned interior range: only its whole pages are dropped.
    CHECK(ReleaseMappedPages(mapped + 3, (values.size() - 10) * sizeof(float)));
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(mapped[i] == values[i]);
    // Past the end of the mapping, or memory that is not a mapped file: nothing is done.
    CHECK_FALSE(ReleaseMappedPages(mapped + 8, values.size() * sizeof(float)));
    CHECK_FALSE(ReleaseMappedPages(values.data(), values.size() * sizeof(float)));
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(values[i] == static_cast<float>(i) * 0.5f);
  }
  std::remove(path.c_str());
}
