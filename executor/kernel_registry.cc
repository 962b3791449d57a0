#include "executor/kernel_registry.h"

namespace onnx_light::core::runtime {

namespace {
std::string NormalDomain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}
}  // namespace

void KernelRegistry::Register(const std::string& domain, const std::string& op_type,
                              symbolic::Device device, KernelFactory factory,
                              int64_t since_version) {
  (void)device;  // CPU is the only device
  kernels_[{NormalDomain(domain), op_type}][since_version] = std::move(factory);
}

const KernelFactory* KernelRegistry::Find(const std::string& domain, const std::string& op_type,
                                          int64_t opset, symbolic::Device device,
                                          int64_t* since_version) const {
  (void)device;
  auto it = kernels_.find({NormalDomain(domain), op_type});
  if (it == kernels_.end()) return nullptr;
  auto v = it->second.upper_bound(opset <= 0 ? INT64_MAX : opset);
  if (v == it->second.begin()) return nullptr;
  --v;
  if (since_version != nullptr) *since_version = v->first;
  return &v->second;
}

bool KernelRegistry::Contains(const std::string& domain, const std::string& op_type) const {
  return kernels_.count({NormalDomain(domain), op_type}) != 0;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::List() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, versions] : kernels_) out.push_back(key);
  return out;
}

}  // namespace onnx_light::core::runtime
