// Safetensors writer: fp32 in, the requested dtype on disk, laid out as Hugging Face's
// serializer does (data sorted by decreasing element size then name; header padded to 8 bytes).

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

namespace spindle::engine {
namespace {

using json = nlohmann::json;

constexpr size_t kChunk = size_t(1) << 20;  // elements converted per write

template <class Int>
void convert_to_int(const float* src, Int* dst, size_t n, const std::string& name) {
  for (size_t i = 0; i < n; ++i) {
    const double r = std::nearbyint(double(src[i]));
    SPINDLE_CHECK(std::isfinite(r) && r >= double(std::numeric_limits<Int>::min()) &&
                      r <= double(std::numeric_limits<Int>::max()),
                  invalid_argument,
                  "write_safetensors: tensor '{}' value {} does not fit its "
                  "integer dtype",
                  name, src[i]);
    dst[i] = Int(r);
  }
}

void convert_chunk(DType dtype, const float* src, uint8_t* dst, size_t n, const std::string& name) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      convert_from_f32(dtype, src, dst, n);
      return;
    case DType::i32:
      convert_to_int(src, reinterpret_cast<int32_t*>(dst), n, name);
      return;
    case DType::i64:
      convert_to_int(src, reinterpret_cast<int64_t*>(dst), n, name);
      return;
    case DType::u8:
      convert_to_int(src, dst, n, name);
      return;
  }
  SPINDLE_THROW(internal, "write_safetensors: unhandled dtype");
}

}  // namespace

namespace {

// Serialises to `write(data, n)` in order: length, header, tensor data. `what` names the
// destination in errors.
void emit_safetensors(std::span<const SafetensorsTensorIn> tensors,
                      const std::map<std::string, std::string>& metadata, const std::string& what,
                      const std::function<void(const void*, size_t)>& write) {
  // Layout order: larger elements first keeps every tensor naturally aligned.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = dtype_size(tensors[a].dtype), sb = dtype_size(tensors[b].dtype);
    return sa != sb ? sa > sb : tensors[a].name < tensors[b].name;
  });

  json header = json::object();
  uint64_t offset = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& t = tensors[order[k]];
    SPINDLE_CHECK(t.name != "__metadata__", invalid_argument,
                  "write_safetensors: {}: '__metadata__' is reserved, not a tensor name",
                  what);
    SPINDLE_CHECK(!header.contains(t.name), invalid_argument,
                  "write_safetensors: {}: tensor '{}' given twice", what, t.name);
    const uint64_t numel = uint64_t(shape_numel(t.shape));
    SPINDLE_CHECK(numel == 0 || t.data != nullptr, invalid_argument,
                  "write_safetensors: {}: tensor '{}' has no data", what, t.name);
    const uint64_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text;
  try {
    text = header.dump();  // keys sorted (nlohmann objects are ordered maps)
  } catch (const json::exception& ex) {
    SPINDLE_THROW(invalid_argument, "write_safetensors: {}: cannot encode header: {}", what,
                  ex.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  write(len_le, 8);
  write(text.data(), text.size());
  {
    std::vector<uint8_t> buf;
    for (size_t idx : order) {
      const auto& t = tensors[idx];
      const size_t n = size_t(shape_numel(t.shape));
      const size_t esize = dtype_size(t.dtype);
      if (t.dtype == DType::f32) {  // no conversion: write straight from the caller's buffer
        write(t.data, n * 4);
        continue;
      }
      buf.resize(std::min(n, kChunk) * esize);
      for (size_t done = 0; done < n;) {
        const size_t count = std::min(kChunk, n - done);
        convert_chunk(t.dtype, t.data + done, buf.data(), count, t.name);
        write(buf.data(), count * esize);
        done += count;
      }
    }
  }
}

}  // namespace

void stream_safetensors(std::span<const SafetensorsTensorIn> tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::function<void(const void* data, size_t n)>& write) {
  emit_safetensors(tensors, metadata, "(stream)", write);
}

void write_safetensors(const std::filesystem::path& path,
                       std::span<const SafetensorsTensorIn> tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, [&](FileSink& sink) {
    emit_safetensors(tensors, metadata, path.string(),
                     [&](const void* data, size_t n) { sink.write(data, n); });
  });
}

std::string encode_safetensors(std::span<const SafetensorsTensorIn> tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::string out;
  size_t total = 0;
  for (const auto& t : tensors) total += size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
  out.reserve(total + 65536);  // the data plus a typical header: no regrowth
  emit_safetensors(tensors, metadata, "(in memory)", [&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
  });
  return out;
}

}  // namespace spindle::engine
