// Safetensors header parser and reader. The parser is pure (bytes in, header or
// spindle::Error out) so that the fuzz target exercises exactly what loaders run.

#include "spindle/engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>
#include <set>

#include "spindle/core/error.h"

namespace spindle::engine {
namespace {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Spindle reads it without byte swapping");

constexpr int kMaxJsonDepth = 32;  // a valid header nests 3 deep
constexpr uint64_t kMaxDim = uint64_t(1) << 53;

struct DtypeInfo {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};

// Every safetensors dtype with a whole-byte element size. Sub-byte formats (F4, F6_*) are
// refused as unsupported.
constexpr DtypeInfo kDtypes[] = {
    {"F32", 4, DType::f32}, {"F16", 2, DType::f16}, {"BF16", 2, DType::bf16},
    {"I32", 4, DType::i32}, {"I64", 8, DType::i64}, {"U8", 1, DType::u8},
    {"F64", 8, {}},         {"I8", 1, {}},          {"I16", 2, {}},
    {"U16", 2, {}},         {"U32", 4, {}},         {"U64", 8, {}},
    {"BOOL", 1, {}},        {"F8_E4M3", 1, {}},     {"F8_E5M2", 1, {}},
    {"F8_E8M0", 1, {}},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// Names in messages are clipped: a hostile header may hold a 100 MiB key.
std::string clip(std::string_view s) {
  constexpr size_t kMax = 120;
  if (s.size() <= kMax) return std::string(s);
  return std::string(s.substr(0, kMax)) + "...";
}

// First pass over the JSON: rejects nesting deeper than kMaxJsonDepth and duplicate keys in
// any object (nlohmann's DOM silently keeps the last), without building anything.
class HeaderSax : public nlohmann::json_sax<json> {
 public:
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return check_depth();
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error = fmt::format("duplicate key '{}'{}", clip(k),
                          keys_.size() == 1 ? " (two tensors with the same name)" : "");
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return check_depth(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error = fmt::format("not valid JSON: {}", ex.what());
    return false;
  }

 private:
  bool check_depth() {
    if (++depth_ > kMaxJsonDepth) {
      error = fmt::format("JSON nests deeper than {} levels", kMaxJsonDepth);
      return false;
    }
    return true;
  }
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;
};

uint64_t as_u64(const json& v, const std::string& source, const std::string& where) {
  SPINDLE_CHECK(v.is_number_unsigned(), format,
                "{}: {} must be a non-negative integer, got {} ({})", source, where, clip(v.dump()),
                v.type_name());
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t data_size,
                             const std::string& source) {
  const std::string what = fmt::format("tensor '{}'", clip(name));
  SPINDLE_CHECK(v.is_object(), format, "{}: {}: entry must be an object, got {}", source, what,
                v.type_name());
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    SPINDLE_CHECK(v.contains(field), format, "{}: {}: missing field '{}'", source, what, field);
  }
  SafetensorsEntry e;
  e.name = name;

  const json& dt = v["dtype"];
  SPINDLE_CHECK(dt.is_string(), format, "{}: {}: dtype must be a string, got {}", source, what,
                dt.type_name());
  const DtypeInfo* info = find_dtype(dt.get_ref<const std::string&>());
  SPINDLE_CHECK(info != nullptr, unsupported,
                "{}: {}: unknown or unsupported dtype '{}' (expected one of F32, F16, BF16, I32, "
                "I64, U8, F64, I8, I16, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2)",
                source, what, clip(dt.get_ref<const std::string&>()));
  e.dtype = info->name;
  e.known_dtype = info->dtype;
  e.element_size = info->size;

  const json& shape = v["shape"];
  SPINDLE_CHECK(shape.is_array(), format, "{}: {}: shape must be an array, got {}", source, what,
                shape.type_name());
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t d = as_u64(shape[i], source, fmt::format("{}: shape[{}]", what, i));
    SPINDLE_CHECK(d <= kMaxDim, format, "{}: {}: shape[{}] = {} is implausibly large", source, what,
                  i, d);
    e.shape.push_back(int64_t(d));
    overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
  }
  // A zero dimension makes the product 0 whatever overflowed before it.
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    numel = 0;
    overflow = false;
  }

  const json& offs = v["data_offsets"];
  SPINDLE_CHECK(offs.is_array() && offs.size() == 2, format,
                "{}: {}: data_offsets must be an array [begin, end], got {}", source, what,
                clip(offs.dump()));
  e.data_begin = as_u64(offs[0], source, what + ": data_offsets[0]");
  e.data_end = as_u64(offs[1], source, what + ": data_offsets[1]");
  SPINDLE_CHECK(e.data_begin <= e.data_end, format,
                "{}: {}: data_offsets [{}, {}] end before they begin", source, what, e.data_begin,
                e.data_end);
  SPINDLE_CHECK(e.data_end <= data_size, format,
                "{}: {}: data_offsets [{}, {}] reach past the data section ({} bytes); the file "
                "is truncated or the header is corrupt",
                source, what, e.data_begin, e.data_end, data_size);
  uint64_t want_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t(e.element_size), &want_bytes);
  SPINDLE_CHECK(!overflow, format, "{}: {}: shape {} overflows 64-bit byte counts", source, what,
                shape_str(e.shape));
  SPINDLE_CHECK(want_bytes == e.byte_size(), format,
                "{}: {}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", source,
                what, e.data_begin, e.data_end, e.byte_size(), shape_str(e.shape), e.dtype,
                want_bytes);
  return e;
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries.begin(), entries.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries.end() && it->name == name ? &*it : nullptr;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t n_bytes, uint64_t file_size,
                                           const std::string& source) {
  SPINDLE_CHECK(bytes != nullptr || n_bytes == 0, invalid_argument,
                "{}: parse_safetensors_header: null bytes", source);
  SPINDLE_CHECK(n_bytes <= file_size, invalid_argument,
                "{}: parse_safetensors_header: {} bytes given for a {}-byte file", source, n_bytes,
                file_size);
  SPINDLE_CHECK(file_size >= 8, format,
                "{}: file is {} bytes, too short for the 8-byte safetensors header length", source,
                file_size);
  SPINDLE_CHECK(n_bytes >= 8, invalid_argument,
                "{}: parse_safetensors_header needs at least the first 8 bytes, got {}", source,
                n_bytes);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  SPINDLE_CHECK(n <= file_size - 8, format,
                "{}: header length field says {} bytes, but only {} follow it; the file is "
                "truncated or not safetensors (hint: a PyTorch .bin/.pt must be converted first)",
                source, n, file_size - 8);
  SPINDLE_CHECK(n <= kSafetensorsMaxHeaderBytes, format,
                "{}: header length {} exceeds the {}-byte limit", source, n,
                kSafetensorsMaxHeaderBytes);
  SPINDLE_CHECK(n_bytes - 8 >= n, invalid_argument,
                "{}: parse_safetensors_header got {} of the {} header bytes", source, n_bytes - 8,
                n);
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  const uint64_t data_size = file_size - 8 - n;

  HeaderSax sax;
  if (!json::sax_parse(text, text + n, &sax)) {
    SPINDLE_THROW(format, "{}: header {}", source,
                  sax.error.empty() ? std::string("is not valid JSON") : sax.error);
  }
  json doc;
  try {
    doc = json::parse(text, text + n);
  } catch (const json::exception& ex) {
    SPINDLE_THROW(format, "{}: header is not valid JSON: {}", source, ex.what());
  }
  SPINDLE_CHECK(doc.is_object(), format, "{}: header must be a JSON object, got {}", source,
                doc.type_name());

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      SPINDLE_CHECK(value.is_object(), format, "{}: __metadata__ must be an object, got {}", source,
                    value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        SPINDLE_CHECK(mv.is_string(), format,
                      "{}: __metadata__ value of '{}' must be a string, got {}", source, clip(mk),
                      mv.type_name());
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, value, data_size, source));
  }
  // nlohmann objects iterate in key order, so entries are sorted by name already.
  SPINDLE_ASSERT(std::is_sorted(h.entries.begin(), h.entries.end(),
                                [](const auto& a, const auto& b) { return a.name < b.name; }));

  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : h.entries) {
    if (e.byte_size() > 0) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* cur = by_offset[i];
    SPINDLE_CHECK(cur->data_begin >= prev->data_end, format,
                  "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", source,
                  clip(prev->name), prev->data_begin, prev->data_end, clip(cur->name),
                  cur->data_begin, cur->data_end);
  }
  return h;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : reader_(path) {
  const std::string source = path.string();
  const uint64_t size = reader_.size();
  std::vector<uint8_t> head(size_t(std::min<uint64_t>(size, 8)));
  reader_.read_at(0, head.data(), head.size());
  if (head.size() == 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[size_t(i)];
    // Read the JSON only when the length is sane; otherwise the parser reports the length.
    if (n <= size - 8 && n <= kSafetensorsMaxHeaderBytes) {
      head.resize(size_t(8 + n));
      reader_.read_at(8, head.data() + 8, size_t(n));
    }
  }
  header_ = parse_safetensors_header(head.data(), head.size(), size, source);
}

void SafetensorsFile::read_raw(const SafetensorsEntry& entry, void* dst) const {
  reader_.read_at(header_.data_offset + entry.data_begin, dst, size_t(entry.byte_size()));
}

Tensor SafetensorsFile::read_f32(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  SPINDLE_CHECK(e != nullptr, not_found, "{}: no tensor named '{}'", path().string(), clip(name));
  return read_f32(*e);
}

Tensor SafetensorsFile::read_f32(const SafetensorsEntry& entry) const {
  const auto dt = entry.known_dtype;
  SPINDLE_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, unsupported,
                "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 can be read as fp32",
                path().string(), clip(entry.name), entry.dtype);
  Tensor t(entry.shape);
  const uint64_t base = header_.data_offset + entry.data_begin;
  if (*dt == DType::f32) {
    reader_.read_at(base, t.data(), size_t(entry.byte_size()));
    return t;
  }
  // Half-precision data goes through a bounded staging buffer.
  constexpr size_t kChunk = size_t(4) << 20;  // elements
  const size_t n = size_t(t.numel());
  std::vector<uint8_t> staging(std::min(n, kChunk) * entry.element_size);
  for (size_t done = 0; done < n;) {
    const size_t count = std::min(kChunk, n - done);
    reader_.read_at(base + done * entry.element_size, staging.data(), count * entry.element_size);
    convert_to_f32(*dt, staging.data(), t.data() + done, count);
    done += count;
  }
  return t;
}

SafetensorsBytes::SafetensorsBytes(std::string bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)) {
  header_ = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes_.data()),
                                     bytes_.size(), bytes_.size(), source_);
}

Tensor SafetensorsBytes::read_f32(const SafetensorsEntry& entry) const {
  const auto dt = entry.known_dtype;
  SPINDLE_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16, unsupported,
                "{}: tensor '{}' has dtype {}; only F32, F16 and BF16 can be read as fp32",
                source_, clip(entry.name), entry.dtype);
  Tensor t(entry.shape);
  // parse_safetensors_header checked that the range lies inside the data section.
  convert_to_f32(*dt, bytes_.data() + header_.data_offset + entry.data_begin, t.data(),
                 size_t(t.numel()));
  return t;
}

}  // namespace spindle::engine
