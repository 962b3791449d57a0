// Kernel lookup by (domain, op_type, opset). Built-in kernels live in ops/ and are listed
// explicitly in ops/op_list.cc; contexts add custom kernels on top (RegisterKernelFn).
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "executor/kernel.h"

namespace onnx_light::core::runtime {

class KernelRegistry {
 public:
  // `since_version`: the first opset of `domain` this kernel implements.
  void Register(const std::string& domain, const std::string& op_type, symbolic::Device device,
                KernelFactory factory, int64_t since_version = 1);
  // The factory with the greatest since_version <= opset (the newest when opset <= 0); null
  // when none applies. Stores that since_version in `*since_version` when given.
  const KernelFactory* Find(const std::string& domain, const std::string& op_type, int64_t opset,
                            symbolic::Device device = symbolic::Device::kCPU,
                            int64_t* since_version = nullptr) const;
  bool Contains(const std::string& domain, const std::string& op_type) const;
  bool empty() const { return kernels_.empty(); }
  // (domain, op_type) of every registered kernel, sorted.
  std::vector<std::pair<std::string, std::string>> List() const;

 private:
  // (domain, op_type) -> since_version -> factory
  std::map<std::pair<std::string, std::string>, std::map<int64_t, KernelFactory>> kernels_;
};

// The built-in kernels (defined by ops/op_list.cc).
const KernelRegistry& BuiltinKernels();

}  // namespace onnx_light::core::runtime
