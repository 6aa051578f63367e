#pragma once
// Kernels are the lowest layer: they check their contracts and throw std::invalid_argument
// naming the kernel and the violated condition. The engine converts nothing: callers above
// validate user input first, so a kernel error means a caller bug.

#include <stdexcept>
#include <string>

namespace spindle::kernels {

[[noreturn]] inline void contract_violation(const char* kernel, const std::string& what) {
  throw std::invalid_argument(std::string(kernel) + ": " + what);
}

}  // namespace spindle::kernels

#define SPINDLE_KERNEL_REQUIRE(cond, kernel, what)                                       \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] ::spindle::kernels::contract_violation(kernel, what);      \
  } while (0)
