#include "spindle/core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "spindle/core/error.h"

namespace spindle {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    SPINDLE_CHECK(d >= 0, invalid_argument, "negative dimension in shape {}", shape_str(shape));
    SPINDLE_CHECK(d == 0 || n <= (int64_t(1) << 40) / d, invalid_argument,
                  "shape {} has more than 2^40 elements", shape_str(shape));
    n *= d;
  }
  return n;
}

// A slice of a block is freed with the block (its last owner's shared_ptr).
void Tensor::Free::operator()(float* p) const {
  if (!block) std::free(p);
}

namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeFrom = size_t(8) << 20;  // tensors this large go on transparent huge pages

size_t padded_bytes(int64_t numel) {
  return std::max<size_t>(64, (size_t(numel) * sizeof(float) + 63) / 64 * 64);
}

// `bytes` of 64-byte aligned memory; large buffers (weights, slot pools, KV caches, decoded
// adapters) start on a 2 MiB boundary and ask for transparent huge pages over their whole huge
// pages: 512× fewer page faults when first touched (a cold adapter load writes ~1.6 GB into
// fresh memory) and fewer TLB misses when streamed. The kernel may still back them with small
// pages. `what` names the allocation in the out-of-memory error.
float* allocate(size_t bytes, const std::string& what) {
  const bool huge = bytes >= kHugeFrom;
  const size_t size = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
  void* p = std::aligned_alloc(huge ? kHugePage : 64, size);
  SPINDLE_CHECK(p != nullptr, resource, "out of memory allocating {} ({} bytes)", what, bytes);
  if (huge) ::madvise(p, size, MADV_HUGEPAGE);
  return static_cast<float*>(p);
}

}  // namespace

Tensor::Tensor(Shape shape) : shape_(std::move(shape)), numel_(shape_numel(shape_)) {
  data_.reset(allocate(padded_bytes(numel_), "tensor " + shape_str(shape_)));
}

std::vector<Tensor> Tensor::in_one_block(std::span<const Shape> shapes) {
  std::vector<Tensor> out(shapes.size());
  size_t total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out[i].shape_ = shapes[i];
    out[i].numel_ = shape_numel(shapes[i]);
    total += padded_bytes(out[i].numel_);
  }
  if (shapes.empty()) return out;
  float* base = allocate(total, fmt::format("a block of {} tensors", shapes.size()));
  const std::shared_ptr<void> block(base, [](void* p) { std::free(p); });
  size_t offset = 0;
  for (Tensor& t : out) {
    t.data_ = std::unique_ptr<float[], Free>(base + offset / sizeof(float), Free{block});
    offset += padded_bytes(t.numel_);
  }
  return out;
}

Tensor Tensor::zeros(Shape shape) {
  Tensor t(std::move(shape));
  t.fill(0.0f);
  return t;
}

Tensor Tensor::from(Shape shape, std::span<const float> values) {
  Tensor t(std::move(shape));
  SPINDLE_CHECK(size_t(t.numel()) == values.size(), invalid_argument,
                "Tensor::from: shape {} needs {} values, got {}", shape_str(t.shape()), t.numel(),
                values.size());
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::clone() const {
  if (!data_) return Tensor();
  Tensor t(shape_);
  if (numel_) std::memcpy(t.data(), data(), bytes());
  return t;
}

void Tensor::fill(float value) { std::fill_n(data_.get(), numel_, value); }

}  // namespace spindle
