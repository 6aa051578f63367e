#include "spindle/engine_cuda/device_tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace spindle::engine_cuda {

namespace cuda = kernels::cuda;

namespace {
// Per thread: a graph is captured and replayed by the one thread that drives its model, and the
// buffers it bakes in (its state's tensors and staging) are reallocated by that thread only; a
// process-wide count made every engine thread's reallocation miss every other base's graphs.
thread_local uint64_t t_generation = 0;
std::atomic<uint64_t> g_object_id{0};
}  // namespace

uint64_t device_generation() {
  return t_generation;
}
void bump_device_generation() {
  ++t_generation;
}
uint64_t next_device_object_id() {
  return g_object_id.fetch_add(1, std::memory_order_relaxed) + 1;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) {
    void* p = nullptr;
    cuda::check(cudaHostAlloc(&p, bytes_, cudaHostAllocDefault), "cudaHostAlloc");
    ptr_ = static_cast<unsigned char*>(p);
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

TableStaging::~TableStaging() {
  if (copied_ != nullptr) {
    if (recorded_) cudaEventSynchronize(copied_);  // the pinned memory must outlive its copy
    cudaEventDestroy(copied_);
  }
}

TableStaging::TableStaging(TableStaging&& o) noexcept
    : host_(std::move(o.host_)),
      device_(std::move(o.device_)),
      copied_(std::exchange(o.copied_, nullptr)),
      recorded_(std::exchange(o.recorded_, false)),
      cursor_(std::exchange(o.cursor_, 0)),
      limit_(std::exchange(o.limit_, 0)) {}

TableStaging& TableStaging::operator=(TableStaging&& o) noexcept {
  if (this != &o) {
    this->~TableStaging();
    new (this) TableStaging(std::move(o));
  }
  return *this;
}

void TableStaging::begin(size_t bytes) {
  if (recorded_) {
    cuda::check(cudaEventSynchronize(copied_), "cudaEventSynchronize (table staging)");
  }
  if (bytes > host_.bytes()) {
    // Generous growth: reallocation also invalidates every captured graph.
    // Both allocated before either replaces its predecessor: an out-of-memory error leaves the
    // old pair (and the graphs that read it) intact.
    const size_t cap = std::max<size_t>(aligned(bytes) * 2, size_t{16} << 10);
    PinnedBuffer host(cap);
    cuda::DeviceBuffer<unsigned char> device(cap);
    host_ = std::move(host);
    device_ = std::move(device);
    bump_device_generation();
  }
  cursor_ = 0;
  limit_ = bytes;
}

size_t TableStaging::put(const void* src, size_t bytes) {
  const size_t at = aligned(cursor_);
  if (at + bytes > limit_) {
    throw std::logic_error("TableStaging::put: " + std::to_string(at + bytes) +
                           " bytes exceed the " + std::to_string(limit_) + " begun");
  }
  if (bytes > 0) std::memcpy(host_.data() + at, src, bytes);
  cursor_ = at + bytes;
  return at;
}

void TableStaging::copy(size_t bytes, cudaStream_t stream) {
  if (bytes > host_.bytes() || bytes > device_.size()) {
    throw std::logic_error("TableStaging::copy: beyond the staging");
  }
  if (bytes == 0) return;
  cuda::check(cudaMemcpyAsync(device_.data(), host_.data(), bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync H2D (forward tables)");
}

void TableStaging::record(cudaStream_t stream) {
  if (copied_ == nullptr) {
    cuda::check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate");
  }
  cuda::check(cudaEventRecord(copied_, stream), "cudaEventRecord (table staging)");
  recorded_ = true;
}

const char* precision_name(Precision precision) {
  return precision == Precision::fp32 ? "fp32" : "bf16";
}

size_t precision_bytes(Precision precision) {
  return precision == Precision::fp32 ? 4 : 2;
}

void DeviceTensor::ensure(int64_t rows, int64_t cols, Precision dtype) {
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("DeviceTensor::ensure: negative shape [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  }
  const size_t need = size_t(rows * cols) * precision_bytes(dtype);
  if (dtype != dtype_ || need > storage_.size()) {
    storage_ = cuda::DeviceBuffer<unsigned char>(need);
    bump_device_generation();
  }
  rows_ = rows;
  cols_ = cols;
  dtype_ = dtype;
}

void DeviceTensor::reset() {
  storage_ = {};
  rows_ = cols_ = 0;
}

void DeviceTensor::zero(cudaStream_t stream) {
  if (bytes() > 0) {
    cuda::check(cudaMemsetAsync(storage_.data(), 0, bytes(), stream), "cudaMemsetAsync");
  }
}

template <class T>
T* DeviceTensor::data() {
  if (precision_of<T>() != dtype_) {
    throw std::logic_error(std::string("DeviceTensor holds ") + precision_name(dtype_) +
                           ", accessed as " + precision_name(precision_of<T>()));
  }
  return reinterpret_cast<T*>(storage_.data());
}

template <class T>
const T* DeviceTensor::data() const {
  return const_cast<DeviceTensor*>(this)->data<T>();
}

void DeviceTensor::upload(const float* host, int64_t count, cudaStream_t stream) {
  if (count != numel()) {
    throw std::invalid_argument("DeviceTensor::upload: " + std::to_string(count) + " values for " +
                                std::to_string(numel()) + " elements");
  }
  if (count == 0) return;
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (dtype_ == Precision::fp32) {
    cuda::check(cudaMemcpy(storage_.data(), host, bytes(), cudaMemcpyHostToDevice),
                "cudaMemcpy H2D");
  } else {
    const std::vector<cuda::bf16> b = cuda::to_bf16({host, size_t(count)});
    cuda::check(cudaMemcpy(storage_.data(), b.data(), bytes(), cudaMemcpyHostToDevice),
                "cudaMemcpy H2D");
  }
  // A pageable H2D cudaMemcpy may return before its DMA lands, and the model's streams do not
  // wait on the legacy stream: finish the copy before any of them reads the tensor.
  cuda::check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after upload");
}

std::vector<float> DeviceTensor::download(cudaStream_t stream) const {
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (dtype_ == Precision::fp32) {
    std::vector<float> out(static_cast<size_t>(numel()));
    if (!out.empty()) {
      cuda::check(cudaMemcpy(out.data(), storage_.data(), bytes(), cudaMemcpyDeviceToHost),
                  "cudaMemcpy D2H");
    }
    return out;
  }
  std::vector<cuda::bf16> b(static_cast<size_t>(numel()));
  if (!b.empty()) {
    cuda::check(cudaMemcpy(b.data(), storage_.data(), bytes(), cudaMemcpyDeviceToHost),
                "cudaMemcpy D2H");
  }
  return cuda::to_float(b);
}

void DeviceTensor::copy_from(const DeviceTensor& src, cudaStream_t stream) {
  ensure(src.rows(), src.cols(), src.dtype());
  if (src.bytes() > 0) {
    cuda::check(
        cudaMemcpyAsync(storage_.data(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync D2D");
  }
}

template float* DeviceTensor::data<float>();
template cuda::bf16* DeviceTensor::data<cuda::bf16>();
template const float* DeviceTensor::data<float>() const;
template const cuda::bf16* DeviceTensor::data<cuda::bf16>() const;

}  // namespace spindle::engine_cuda
