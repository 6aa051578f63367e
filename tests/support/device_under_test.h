#pragma once
// The execution backend a test binary runs on: one test body per behaviour, every backend.
// CTest registers a suite once per device: plainly for the CPU, and with the prefix "cuda." and
// SPINDLE_TEST_DEVICE=cuda for the CUDA engine (f32, so the CPU engine stays a tight
// reference). Where the device does not exist, every test of that instance skips with the
// reason (DeviceEnvironment, registered by including this header).

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "spindle/core/error.h"
#include "spindle/execution/select.h"

namespace spindle::testing {

// $SPINDLE_TEST_DEVICE, default "cpu".
inline std::string test_device() {
  const char* d = std::getenv("SPINDLE_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}
inline bool testing_cpu() { return test_device() == "cpu"; }

// The backend under test over `weights` (which must outlive it), f32.
inline std::unique_ptr<engine::ExecutionBackend> backend_under_test(
    const engine::ModelWeights& weights) {
  return execution::open_backend(weights, {.device = test_device(), .dtype = "f32"});
}

// Skips every test when the device under test is absent (GTEST_SKIP in a global SetUp).
class DeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    try {
      (void)execution::resolve_device(test_device());
    } catch (const Error& e) {
      GTEST_SKIP() << "no " << test_device() << " device here: " << e.what();
    }
  }
};

inline ::testing::Environment* const kDeviceEnvironment =
    ::testing::AddGlobalTestEnvironment(new DeviceEnvironment);

}  // namespace spindle::testing
