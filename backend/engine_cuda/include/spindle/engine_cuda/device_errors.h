#pragma once
// The CUDA engine's error boundary (STYLE.md 8): errors of the layers below (CudaError from a
// CUDA, cuBLAS or NCCL call; std::invalid_argument from a violated kernel contract) become
// spindle::Error here, once, at the entry points the execution backend calls:
//   - a device out of memory -> ErrorCode::resource, "out of device memory on cuda:N while
//     <what>: <call> at <file>:<line>: <driver message>" (the wire's resource_exhausted);
//   - any other CUDA failure -> ErrorCode::internal with the same naming;
//   - a kernel contract violation -> ErrorCode::internal (the engine passed bad shapes: a bug).
// spindle::Error passes through unchanged.

#include <concepts>
#include <string>
#include <utility>

#include "spindle/core/error.h"
#include "spindle/engine/device.h"
#include "spindle/kernels/cuda/runtime.h"

namespace spindle::engine_cuda {

// The spindle::Error for a CUDA failure met while doing `what` on `device`.
Error device_error(const kernels::cuda::CudaError& e, const std::string& what,
                   const engine::Device& device);

// Makes `device` current on the calling thread (cudaSetDevice): CUDA's current device is per
// thread, and the engine thread is not the thread that built the backend.
void use_device(const engine::Device& device);

namespace internal {
inline std::string describe(const char* what) { return what; }
template <class W>
  requires std::invocable<W&>
std::string describe(W& what) {
  return what();
}
}  // namespace internal

// Runs f() on `device`, mapping foreign errors as above. `what` (a string, or a callable that
// formats one) is only rendered when something fails: the hot paths (a forward per engine
// step) format nothing.
template <class What, class F>
decltype(auto) device_call(const engine::Device& device, What&& what, F&& f) {
  try {
    use_device(device);
    return std::forward<F>(f)();
  } catch (const kernels::cuda::CudaError& e) {
    throw device_error(e, internal::describe(what), device);
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorCode::internal,
                internal::describe(what) + ": kernel contract violated: " + e.what());
  }
}

}  // namespace spindle::engine_cuda
