// Holds a test's first scheduler request at its first token until the test has submitted
// every request, so that the requests overlap as the test expects however slowly the
// submitting thread runs (a loaded machine can otherwise let the first one finish alone).
#pragma once

#include <chrono>
#include <future>
#include <stdexcept>
#include <utility>
#include <vector>

#include "state/generate.h"

namespace test_util {

class SubmitGate {
 public:
  // An on_token that waits for Open() (at most a minute), then calls `next` if any.
  onnx_light::core::runtime::TokenCallback Hold(
      onnx_light::core::runtime::TokenCallback next = nullptr) {
    return
        [open = open_, next = std::move(next)](int64_t step, const std::vector<int64_t>& tokens) {
          if (open.wait_for(std::chrono::minutes(1)) != std::future_status::ready)
            throw std::runtime_error("SubmitGate: the test never opened the gate");
          return next ? next(step, tokens) : true;
        };
  }
  void Open() { promise_.set_value(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> open_ = promise_.get_future().share();
};

}  // namespace test_util
