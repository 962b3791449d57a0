// ExpectError: runs `fn`, requires it to throw onnx_light::core::Error with `code`, and checks
// that the message contains every fragment (the names a user needs to find the fault).
#pragma once

#include <doctest/doctest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace test_util {

template <class Fn>
void ExpectError(Fn&& fn, onnx_light::core::ErrorCode code,
                 std::initializer_list<std::string> fragments) {
  try {
    fn();
    FAIL("expected an error");
  } catch (const onnx_light::core::Error& e) {
    CHECK_MESSAGE(e.code() == code, std::string(e.what()));
    for (const auto& f : fragments)
      CHECK_MESSAGE(std::string(e.what()).find(f) != std::string::npos,
                    "'" << f << "' not in: " << std::string(e.what()));
  }
}

template <class Fn>
void ExpectError(Fn&& fn, onnx_light::core::ErrorCode code, const std::string& fragment) {
  ExpectError(std::forward<Fn>(fn), code, {fragment});
}

}  // namespace test_util
