#pragma once
// Host tensors. A Tensor owns a contiguous, row-major, 64-byte aligned fp32 buffer in memory
// the process owns (never a file mapping: the host evicts file-backed pages under pressure and
// a resident base must stay resident). Copying a Tensor is explicit (clone()); moving is cheap.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace spindle {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3]"
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage of the given shape (all dims >= 0).
  explicit Tensor(Shape shape);
  static Tensor zeros(Shape shape);
  static Tensor from(Shape shape, std::span<const float> values);
  // Uninitialised tensors of the given shapes carved out of ONE allocation (each 64-byte
  // aligned), freed when the last of them is destroyed. A block of 8 MiB or more is on
  // transparent huge pages, as a large Tensor is: copying a many-tensor adapter (hundreds of
  // 30–100 KB tensors) into fresh memory then faults a few huge pages instead of thousands of
  // small ones. Any one of them keeps the whole block alive.
  static std::vector<Tensor> in_one_block(std::span<const Shape> shapes);

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor clone() const;

  bool empty() const { return numel_ == 0; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return size_t(numel_) * sizeof(float); }

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::span<float> span() { return {data_.get(), size_t(numel_)}; }
  std::span<const float> span() const { return {data_.get(), size_t(numel_)}; }
  // Row i of a tensor viewed as [dim(0), numel/dim(0)].
  float* row(int64_t i) { return data_.get() + i * (numel_ / shape_[0]); }
  const float* row(int64_t i) const { return data_.get() + i * (numel_ / shape_[0]); }

  void fill(float value);

 private:
  struct Free {
    std::shared_ptr<void> block;  // set when the buffer is a slice of in_one_block's block
    void operator()(float* p) const;
  };
  Shape shape_;
  int64_t numel_ = 0;
  std::unique_ptr<float[], Free> data_;
};

}  // namespace spindle
