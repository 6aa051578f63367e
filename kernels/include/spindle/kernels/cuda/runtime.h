#pragma once
// CUDA runtime helpers shared by every CUDA kernel and by the GPU engine (backend/engine_cuda).
//
// Error policy (the kernels boundary, see kernel_error.h): a violated kernel contract throws
// std::invalid_argument naming the kernel (SPINDLE_KERNEL_REQUIRE); a failing CUDA runtime,
// cuBLAS or NCCL call throws CudaError naming the call and the library's error string. Nothing
// here aborts. Kernel launches are asynchronous on the given stream; a launch error is checked
// right after the launch (check_launch), an execution error surfaces at the next synchronising
// call.
//
// Every kernel takes device pointers and a cudaStream_t; host-side parameters (sizes, counts)
// are passed by value, per-row tables (segments, positions, block tables) live on the device.
// Element types: `float` (the fp32 exactness mode) and `bf16` (the default mode); every
// templated kernel is instantiated for both, accumulating in fp32.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace spindle::kernels::cuda {

using bf16 = __nv_bfloat16;

// A failed CUDA runtime, cuBLAS or NCCL call: what was called, where, and the library's
// status (cudaErrorMemoryAllocation is what a backend boundary maps to "resource exhausted").
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& message, cudaError_t status = cudaErrorUnknown)
      : std::runtime_error(message), status_(status) {}
  cudaError_t status() const { return status_; }
  bool out_of_memory() const { return status_ == cudaErrorMemoryAllocation; }

 private:
  cudaError_t status_;
};

// Throws CudaError("<what> at <file>:<line>: <cudaGetErrorString(status)>") unless status ==
// cudaSuccess; file and line are the caller's (GCC/EDG builtins, as std::source_location uses).
void check(cudaError_t status, const char* what, const char* file = __builtin_FILE(),
           int line = __builtin_LINE());
// cudaGetLastError after a kernel launch, naming the kernel.
void check_launch(const char* kernel);

// Number of usable devices; 0 when there is no device or no driver (never throws).
int device_count() noexcept;
// "NVIDIA H200 (sm_90, 139 GiB)" for device `index`.
std::string device_name(int index);

// Owned device memory of `count` elements of T (cudaMalloc; freed in the destructor).
// Zero-count buffers hold no allocation. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) {
      const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&ptr_), count_ * sizeof(T));
      if (status != cudaSuccess) {
        ptr_ = nullptr;
        const size_t bytes = count_ * sizeof(T);
        count_ = 0;
        check(status, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
      }
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)),
                                           count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }

  // Synchronous copies; host.size() must be <= size(). A pageable-memory cudaMemcpy may return
  // before its DMA lands, and kernels on non-blocking streams do not wait for the legacy default
  // stream, so upload() synchronises that stream: the data is on the device when it returns.
  void upload(std::span<const T> host) {
    if (host.size() > count_) throw std::invalid_argument("DeviceBuffer::upload: too many elements");
    if (!host.empty()) {
      check(cudaMemcpy(ptr_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice),
            "cudaMemcpy H2D");
      check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after upload");
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) {
      check(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    }
    return host;
  }
  void zero(cudaStream_t stream = nullptr) {
    if (count_ > 0) check(cudaMemsetAsync(ptr_, 0, bytes(), stream), "cudaMemsetAsync");
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// An owned non-blocking stream.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Host <-> fp32/bf16 conversion helpers (round to nearest even), for uploads and tests.
std::vector<bf16> to_bf16(std::span<const float> x);
std::vector<float> to_float(std::span<const bf16> x);

}  // namespace spindle::kernels::cuda
