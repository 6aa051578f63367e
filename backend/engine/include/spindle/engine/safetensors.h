#pragma once
// Safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the data section. Offsets are relative to the data
// section (file offset 8 + N). Tensors are read with pread into memory the process owns.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spindle/core/dtype.h"
#include "spindle/core/file_io.h"
#include "spindle/core/tensor.h"

namespace spindle::engine {

// Headers larger than this are refused (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t(100) << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 // safetensors spelling: "F32", "BF16", "BOOL", ...
  std::optional<DType> known_dtype;  // set when Spindle has a DType for it
  size_t element_size = 0;           // bytes per element
  Shape shape;                       // every dim >= 0
  uint64_t data_begin = 0;           // [begin, end) relative to the data section
  uint64_t data_end = 0;

  uint64_t byte_size() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                     // file offset of the data section (8 + N)
  std::vector<SafetensorsEntry> entries;        // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__"

  const SafetensorsEntry* find(std::string_view name) const;
};

// Parses and validates a header. `bytes` holds the first n_bytes of a file of file_size bytes
// (n_bytes <= file_size; it must cover the 8 + N header bytes, or the header is reported as
// truncated). Checks: N <= file_size - 8 and <= kSafetensorsMaxHeaderBytes; the JSON is an
// object; each entry has a known dtype, a shape of non-negative integers, data_offsets
// [b, e] with b <= e <= data size and e - b == numel · element size (overflow-safe); no
// duplicate names; no two non-empty ranges overlap; __metadata__ maps strings to strings.
// Throws spindle::Error (format / unsupported) naming `source`; pure, never crashes on any
// input — the fuzz target calls it directly.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n_bytes, uint64_t file_size,
                                           const std::string& source);

// Reads and parses the header of the open file `reader` (the first 8 + N bytes; a length past
// the file or past kSafetensorsMaxHeaderBytes is not read but reported by the parser). Errors
// as parse_safetensors_header, naming `source`. `raw`, when non-null, receives the bytes read
// (the file's first 8 + N bytes when the length was sane).
SafetensorsHeader read_safetensors_header(const FileReader& reader, const std::string& source,
                                          std::vector<uint8_t>* raw = nullptr);

// An open safetensors file: the header is parsed at open, tensor data is read on demand.
// Read-only; concurrent reads are safe.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return reader_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(std::string_view name) const { return header_.find(name); }

  // Reads a floating tensor (F32, F16, BF16) converted to fp32. Throws not_found for an
  // unknown name, unsupported for other dtypes (naming the tensor and its dtype).
  Tensor read_f32(std::string_view name) const;
  Tensor read_f32(const SafetensorsEntry& entry) const;
  // Reads the tensor's raw bytes (entry.byte_size() of them) into dst.
  void read_raw(const SafetensorsEntry& entry, void* dst) const;

 private:
  FileReader reader_;
  SafetensorsHeader header_;
};

// A safetensors file held in memory (a blob read from a store): the same checks as
// SafetensorsFile. Read-only; concurrent reads are safe.
class SafetensorsBytes {
 public:
  SafetensorsBytes(std::string bytes, std::string source);

  const std::string& source() const { return source_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(std::string_view name) const { return header_.find(name); }
  // F32, F16 or BF16 converted to fp32 (unsupported for other dtypes, naming the tensor).
  Tensor read_f32(const SafetensorsEntry& entry) const;

 private:
  std::string bytes_;
  std::string source_;
  SafetensorsHeader header_;
};

// One tensor to write: fp32 values converted to `dtype` on write (F32/F16/BF16 round to
// nearest even; I32/I64/U8 round to nearest and must be in range).
struct SafetensorsTensorIn {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const float* data = nullptr;  // shape_numel(shape) values
};

// Serialises tensors as Hugging Face does: keys sorted, data laid out by decreasing element
// size then name, header padded with spaces to a multiple of 8 bytes. Written atomically
// (write_file_atomic). Throws invalid_argument on duplicate names or a null data pointer.
void write_safetensors(const std::filesystem::path& path,
                       std::span<const SafetensorsTensorIn> tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same bytes write_safetensors would write, handed to `write(data, n)` in order (header,
// then each tensor's data straight from the caller's fp32 buffer, or converted in 1 Mi-element
// chunks for other dtypes). Deterministic: the same input gives the same byte stream, so a
// caller may run it twice (once to write, once to hash) on two threads at once.
void stream_safetensors(std::span<const SafetensorsTensorIn> tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::function<void(const void* data, size_t n)>& write);
// The same bytes write_safetensors would write, in memory (for blobs).
std::string encode_safetensors(std::span<const SafetensorsTensorIn> tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace spindle::engine
