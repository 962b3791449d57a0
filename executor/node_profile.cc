#include "executor/node_profile.h"

#include "onnx_light.pb.h"

namespace onnx_light::core::runtime {

void NodeProfile::AddNode(const NodeProto& node, uint64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = index_.try_emplace(&node, rows_.size());
  if (added) rows_.push_back({node.name(), node.op_type(), 0, 0});
  Row& row = rows_[it->second];
  ++row.calls;
  row.total_ns += ns;
}

std::vector<NodeProfile::Row> NodeProfile::Rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_;
}

uint64_t NodeProfile::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

void NodeProfile::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  index_.clear();
  rows_.clear();
  runs_ = 0;
}

}  // namespace onnx_light::core::runtime
