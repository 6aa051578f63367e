#include "spindle/gpu/device_tensor.h"

#include <stdexcept>
#include <string>

namespace spindle::gpu {

namespace cuda = kernels::cuda;

const char* precision_name(Precision precision) {
  return precision == Precision::fp32 ? "fp32" : "bf16";
}

size_t precision_bytes(Precision precision) { return precision == Precision::fp32 ? 4 : 2; }

void DeviceTensor::ensure(int64_t rows, int64_t cols, Precision dtype) {
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("DeviceTensor::ensure: negative shape [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  }
  const size_t need = size_t(rows * cols) * precision_bytes(dtype);
  if (dtype != dtype_ || need > storage_.size()) {
    storage_ = cuda::DeviceBuffer<unsigned char>(need);
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
    throw std::invalid_argument("DeviceTensor::upload: " + std::to_string(count) +
                                " values for " + std::to_string(numel()) + " elements");
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
    cuda::check(cudaMemcpyAsync(storage_.data(), src.raw(), src.bytes(),
                                cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync D2D");
  }
}

template float* DeviceTensor::data<float>();
template cuda::bf16* DeviceTensor::data<cuda::bf16>();
template const float* DeviceTensor::data<float>() const;
template const cuda::bf16* DeviceTensor::data<cuda::bf16>() const;

}  // namespace spindle::gpu
