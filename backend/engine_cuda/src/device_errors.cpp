// The CUDA engine's error boundary (device_errors.h).

#include "spindle/engine_cuda/device_errors.h"

#include <fmt/format.h>

namespace spindle::engine_cuda {

Error device_error(const kernels::cuda::CudaError& e, const std::string& what,
                   const engine::Device& device) {
  if (e.out_of_memory()) {
    return Error(ErrorCode::resource, fmt::format("out of device memory on {} while {}: {}",
                                                  device.name(), what, e.what()));
  }
  return Error(ErrorCode::internal,
               fmt::format("device error on {} while {}: {}", device.name(), what, e.what()));
}

void use_device(const engine::Device& device) {
  int current = -1;
  kernels::cuda::check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device.index) {
    kernels::cuda::check(cudaSetDevice(device.index), "cudaSetDevice");
  }
}

}  // namespace spindle::engine_cuda
