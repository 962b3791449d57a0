// Wall time per node accumulated over a session's runs (RuntimeSessionOptions::profile): the
// table users ask for first when tuning a model. Nodes of nested graphs (Loop, If bodies,
// functions) count inside their parent node.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace onnx_light {
class NodeProto;
}

namespace onnx_light::core::runtime {

class NodeProfile {
 public:
  struct Row {
    std::string node_name, op_type;
    uint64_t calls = 0;
    uint64_t total_ns = 0;
  };
  void AddNode(const NodeProto& node, uint64_t ns);
  void AddRun() {
    std::lock_guard<std::mutex> lock(mu_);
    ++runs_;
  }
  // One row per node, in the order nodes first ran.
  std::vector<Row> Rows() const;
  uint64_t runs() const;
  void Clear();

 private:
  mutable std::mutex mu_;
  std::unordered_map<const NodeProto*, size_t> index_;
  std::vector<Row> rows_;
  uint64_t runs_ = 0;
};

}  // namespace onnx_light::core::runtime
