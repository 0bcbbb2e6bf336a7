// Test support: expect a call to fail with a c10::Error whose message (backtrace left out) mentions a
// given text, so tests pin what an error says, not only that one was raised.
#pragma once
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace lmscale::testing {

inline void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(needle), std::string::npos) << e.what_without_backtrace();
  }
}

}  // namespace lmscale::testing
