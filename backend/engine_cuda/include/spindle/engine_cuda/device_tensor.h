#pragma once
// Device tensors of the GPU engine: a 2-D [rows, cols] dense, row-major block of device memory
// whose element type is chosen at run time (the model's Precision for weights and activations,
// fp32 for norm statistics, LoRA scratch and anything the header marks fp32).
//
// Threading: a DeviceTensor is owned by one engine loop; nothing here synchronises.

#include <cstdint>
#include <vector>

#include "spindle/kernels/cuda/runtime.h"

namespace spindle::engine_cuda {

// Element type of the base weights, the KV cache and the activations. fp32 exists for exactness
// checks against the CPU engine; bf16 is the serving and training default.
enum class Precision : uint8_t { fp32, bf16 };
const char* precision_name(Precision precision);
size_t precision_bytes(Precision precision);  // 4 or 2

template <class T>
constexpr Precision precision_of();
template <>
constexpr Precision precision_of<float>() {
  return Precision::fp32;
}
template <>
constexpr Precision precision_of<kernels::cuda::bf16>() {
  return Precision::bf16;
}

class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(int64_t rows, int64_t cols, Precision dtype) { ensure(rows, cols, dtype); }

  // Shapes the tensor [rows, cols] of `dtype`; reallocates only when the byte size grows or the
  // dtype changes (a state reused across steps keeps its memory). Contents are undefined after
  // a reallocation, kept otherwise.
  void ensure(int64_t rows, int64_t cols, Precision dtype);
  void reset();                              // frees the memory
  void zero(cudaStream_t stream = nullptr);  // asynchronous memset of bytes()

  // Typed pointer; throws std::logic_error when T does not match dtype() (a caller bug).
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  void* raw() { return storage_.data(); }
  const void* raw() const { return storage_.data(); }

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t numel() const { return rows_ * cols_; }
  Precision dtype() const { return dtype_; }
  bool empty() const { return numel() == 0; }
  size_t bytes() const { return size_t(numel()) * precision_bytes(dtype_); }
  size_t capacity_bytes() const { return storage_.size(); }

  // Host copies (synchronous; they wait for all work queued on `stream` first). upload converts
  // fp32 to the tensor's dtype; download converts to fp32. upload's size must equal numel().
  void upload(const float* host, int64_t count, cudaStream_t stream = nullptr);
  std::vector<float> download(cudaStream_t stream = nullptr) const;
  // Asynchronous device-to-device copy of `src` (same dtype and shape; ensure()d here).
  void copy_from(const DeviceTensor& src, cudaStream_t stream);

 private:
  kernels::cuda::DeviceBuffer<unsigned char> storage_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  Precision dtype_ = Precision::fp32;
};

// The calling thread's count of device (re)allocations by DeviceTensor::ensure and
// TableStaging. A captured CUDA graph bakes buffer addresses: a graph captured at one value is
// valid only while the value is unchanged (graph.h). Per thread, because the thread that drives
// a model is the only one that reallocates the buffers its graphs read, and another base's
// engine thread must not invalidate them. Never decreases.
uint64_t device_generation();
void bump_device_generation();
// A process-unique id (never 0) for objects whose address a graph key holds (a new object at a
// reused address gets a new id). Thread-safe.
uint64_t next_device_object_id();

// Page-locked host memory (cudaHostAlloc), freed in the destructor. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  unsigned char* data() { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  unsigned char* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The per-forward host tables packed at 16-byte aligned offsets into one pinned staging buffer
// and copied to one device buffer with one cudaMemcpyAsync. Ordering contract: the host never
// overwrites staging bytes a queued copy may still read, because begin() waits (host) for the
// event of the last record() — callers record() after queuing the work that copies the staging
// (the copy itself, or a graph launch containing it). Growth (begin with more bytes than held)
// reallocates both buffers and bumps device_generation(). Not thread-safe; move-only.
class TableStaging {
 public:
  TableStaging() = default;
  ~TableStaging();
  TableStaging(TableStaging&& o) noexcept;
  TableStaging& operator=(TableStaging&& o) noexcept;
  TableStaging(const TableStaging&) = delete;
  TableStaging& operator=(const TableStaging&) = delete;

  static size_t aligned(size_t bytes) { return (bytes + 15) & ~size_t{15}; }
  // Waits for the last recorded copy, makes room for `bytes`, rewinds the packing cursor.
  void begin(size_t bytes);
  // Packs `bytes` of `src` at the next aligned offset (within begin's bytes); returns the offset.
  size_t put(const void* src, size_t bytes);
  template <class T>
  T* device_at(size_t offset) {
    return reinterpret_cast<T*>(device_.data() + offset);
  }
  // Queues the copy of the first `bytes` staged bytes to the device buffer on `stream`.
  void copy(size_t bytes, cudaStream_t stream);
  // Records the event begin() waits for, on `stream` (not while the stream is capturing).
  void record(cudaStream_t stream);
  size_t used() const { return cursor_; }

 private:
  PinnedBuffer host_;
  kernels::cuda::DeviceBuffer<unsigned char> device_;
  cudaEvent_t copied_ = nullptr;
  bool recorded_ = false;
  size_t cursor_ = 0;
  size_t limit_ = 0;
};

// Grows `buf` to at least `count` elements (never shrinks; contents lost on growth).
template <class T>
void ensure_capacity(kernels::cuda::DeviceBuffer<T>& buf, size_t count) {
  if (buf.size() < count) buf = kernels::cuda::DeviceBuffer<T>(count);
}

// Asynchronous upload of a host table into `buf` (grown as needed) on `stream`. The host vector
// may change after the call returns (pageable memory is staged before cudaMemcpyAsync returns).
template <class T>
void upload_table(const std::vector<T>& host, kernels::cuda::DeviceBuffer<T>& buf,
                  cudaStream_t stream) {
  ensure_capacity(buf, host.size());
  if (!host.empty()) {
    kernels::cuda::check(cudaMemcpyAsync(buf.data(), host.data(), host.size() * sizeof(T),
                                         cudaMemcpyHostToDevice, stream),
                         "cudaMemcpyAsync H2D (table)");
  }
}

}  // namespace spindle::engine_cuda
