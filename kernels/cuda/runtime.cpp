// CUDA runtime helpers: error checks, device queries, streams, host-side bf16 conversion.

#include "spindle/kernels/cuda/runtime.h"

#include <cstdio>

namespace spindle::kernels::cuda {

namespace {

// "kernels/cuda/gemm.cu" from an absolute path: the part from the project's top folder on.
std::string_view project_path(const char* file) {
  const std::string_view f(file == nullptr ? "?" : file);
  for (const std::string_view top : {"/kernels/", "/backend/", "/tests/", "/app/"}) {
    const size_t at = f.rfind(top);
    if (at != std::string_view::npos) return f.substr(at + 1);
  }
  return f;
}

}  // namespace

void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) {
    // The failure is also recorded as the thread's last error; clear it so a later check_launch
    // does not blame an unrelated kernel for it.
    (void)cudaGetLastError();
    throw CudaError(std::string(what) + " at " + std::string(project_path(file)) + ":" +
                        std::to_string(line) + ": " + cudaGetErrorString(status),
                    status);
  }
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

int device_count() noexcept {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver / no device: the error is sticky for cudaGetLastError, clear it so the next
    // check_launch does not report it against an unrelated kernel.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  const double gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  char buf[64];
  std::snprintf(buf, sizeof(buf), " (sm_%d%d, %.0f GiB)", prop.major, prop.minor, gib);
  return std::string(prop.name) + buf;
}

Stream::Stream() {
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

std::vector<bf16> to_bf16(std::span<const float> x) {
  std::vector<bf16> out(x.size());
  // __float2bfloat16_rn is host-callable: round to nearest even, NaN preserved.
  for (size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16_rn(x[i]);
  return out;
}

std::vector<float> to_float(std::span<const bf16> x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

}  // namespace spindle::kernels::cuda
