// Tensor frames: raw little-endian values, described by a TensorRef in the header.

#include <bit>
#include <cstring>
#include <limits>

#include "spindle/protocol/wire.h"

namespace spindle::protocol {

// Frames are memcpy'd to and from host order; the wire order is little-endian.
static_assert(std::endian::native == std::endian::little,
              "tensor frames are little-endian; a big-endian host needs byte swaps here");

namespace {

std::vector<int64_t> shape_for(size_t n, std::vector<int64_t> shape) {
  if (shape.empty()) return {int64_t(n)};
  int64_t prod = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ProtocolError(errc::invalid_argument, "add_tensor: negative dimension");
    prod *= d;
  }
  if (uint64_t(prod) != n)
    throw ProtocolError(errc::invalid_argument,
                        "add_tensor: shape holds " + std::to_string(prod) + " values, given " +
                            std::to_string(n));
  return shape;
}

template <class T>
TensorRef add(Frames& frames, std::span<const T> values, std::vector<int64_t> shape,
              const char* dtype) {
  TensorRef ref;
  ref.frame = uint32_t(frames.size());
  ref.dtype = dtype;
  ref.shape = shape_for(values.size(), std::move(shape));
  frames.emplace_back(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  return ref;
}

// The frame `ref` names, checked against dtype and shape.
std::string_view frame_of(const TensorRef& ref, const Frames& frames, std::string_view field,
                          const char* dtype, size_t itemsize) {
  const auto fail = [&](const std::string& why) {
    return ProtocolError(errc::bad_request, std::string(field) + ": " + why);
  };
  if (ref.dtype != dtype) throw fail("dtype '" + ref.dtype + "', expected " + dtype);
  if (ref.frame >= frames.size())
    throw fail("frame " + std::to_string(ref.frame) + " does not exist (" +
               std::to_string(frames.size()) + " frames)");
  uint64_t count = 1;
  for (int64_t d : ref.shape) {
    if (d < 0) throw fail("negative dimension " + std::to_string(d));
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(d) / itemsize)
      throw fail("shape overflows");
    count *= uint64_t(d);
  }
  const std::string& f = frames[ref.frame];
  if (count * itemsize != f.size())
    throw fail("shape holds " + std::to_string(count) + " values (" +
               std::to_string(count * itemsize) + " bytes), frame " +
               std::to_string(ref.frame) + " has " + std::to_string(f.size()) + " bytes");
  return f;
}

template <class T>
std::vector<T> read(const TensorRef& ref, const Frames& frames, std::string_view field,
                    const char* dtype) {
  const std::string_view f = frame_of(ref, frames, field, dtype, sizeof(T));
  std::vector<T> out(f.size() / sizeof(T));
  if (!f.empty()) std::memcpy(out.data(), f.data(), f.size());
  return out;
}

}  // namespace

TensorRef add_tensor(Frames& frames, std::span<const int32_t> values, std::vector<int64_t> shape) {
  return add(frames, values, std::move(shape), "int32");
}

TensorRef add_tensor(Frames& frames, std::span<const float> values, std::vector<int64_t> shape) {
  return add(frames, values, std::move(shape), "float32");
}

TensorRef add_bytes(Frames& frames, std::string_view bytes) {
  TensorRef ref;
  ref.frame = uint32_t(frames.size());
  ref.dtype = "uint8";
  ref.shape = {int64_t(bytes.size())};
  frames.emplace_back(bytes);
  return ref;
}

std::vector<int32_t> read_int32(const TensorRef& ref, const Frames& frames,
                                std::string_view field) {
  return read<int32_t>(ref, frames, field, "int32");
}

std::vector<float> read_float32(const TensorRef& ref, const Frames& frames,
                                std::string_view field) {
  return read<float>(ref, frames, field, "float32");
}

std::string_view read_bytes(const TensorRef& ref, const Frames& frames, std::string_view field) {
  return frame_of(ref, frames, field, "uint8", 1);
}

}  // namespace spindle::protocol
