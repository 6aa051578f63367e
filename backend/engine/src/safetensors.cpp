// Safetensors header parser and reader. The parser is pure (bytes in, header or
// spindle::Error out) so that the fuzz target exercises exactly what loaders run.

#include "spindle/engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

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

uint64_t as_u64(const json& v, const std::string& source, const std::string& where) {
  SPINDLE_CHECK(v.is_number_unsigned(), format,
                "{}: {} must be a non-negative integer, got {} ({})", source, where, clip(v.dump()),
                v.type_name());
  return v.get<uint64_t>();
}

// One tensor entry's fields as the header spelled them (null: absent), checked in a fixed order
// whatever order the JSON gave them in.
struct RawEntry {
  std::string name;
  std::optional<json> dtype, shape, data_offsets;
};

SafetensorsEntry parse_entry(RawEntry& raw, uint64_t data_size, const std::string& source) {
  // Messages name the tensor; built only on failure (a header may hold 10^5 entries).
  const auto what = [&] { return fmt::format("tensor '{}'", clip(raw.name)); };
  const std::pair<const char*, const std::optional<json>*> fields[] = {
      {"dtype", &raw.dtype}, {"shape", &raw.shape}, {"data_offsets", &raw.data_offsets}};
  for (const auto& [field, value] : fields) {
    SPINDLE_CHECK(value->has_value(), format, "{}: {}: missing field '{}'", source, what(), field);
  }
  SafetensorsEntry e;
  const json& dt = *raw.dtype;
  SPINDLE_CHECK(dt.is_string(), format, "{}: {}: dtype must be a string, got {}", source, what(),
                dt.type_name());
  const DtypeInfo* info = find_dtype(dt.get_ref<const std::string&>());
  SPINDLE_CHECK(info != nullptr, unsupported,
                "{}: {}: unknown or unsupported dtype '{}' (expected one of F32, F16, BF16, I32, "
                "I64, U8, F64, I8, I16, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2)",
                source, what(), clip(dt.get_ref<const std::string&>()));
  e.dtype = info->name;
  e.known_dtype = info->dtype;
  e.element_size = info->size;

  const json& shape = *raw.shape;
  SPINDLE_CHECK(shape.is_array(), format, "{}: {}: shape must be an array, got {}", source, what(),
                shape.type_name());
  uint64_t numel = 1;
  bool overflow = false;
  e.shape.reserve(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& dim = shape[i];
    if (!dim.is_number_unsigned()) {
      (void)as_u64(dim, source, fmt::format("{}: shape[{}]", what(), i));
    }
    const uint64_t d = dim.get<uint64_t>();
    SPINDLE_CHECK(d <= kMaxDim, format, "{}: {}: shape[{}] = {} is implausibly large", source,
                  what(), i, d);
    e.shape.push_back(int64_t(d));
    overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
  }
  // A zero dimension makes the product 0 whatever overflowed before it.
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    numel = 0;
    overflow = false;
  }

  const json& offs = *raw.data_offsets;
  SPINDLE_CHECK(offs.is_array() && offs.size() == 2, format,
                "{}: {}: data_offsets must be an array [begin, end], got {}", source, what(),
                clip(offs.dump()));
  for (size_t i = 0; i < 2; ++i) {
    if (!offs[i].is_number_unsigned()) {
      (void)as_u64(offs[i], source, fmt::format("{}: data_offsets[{}]", what(), i));
    }
  }
  e.data_begin = offs[0].get<uint64_t>();
  e.data_end = offs[1].get<uint64_t>();
  SPINDLE_CHECK(e.data_begin <= e.data_end, format,
                "{}: {}: data_offsets [{}, {}] end before they begin", source, what(), e.data_begin,
                e.data_end);
  SPINDLE_CHECK(e.data_end <= data_size, format,
                "{}: {}: data_offsets [{}, {}] reach past the data section ({} bytes); the file "
                "is truncated or the header is corrupt",
                source, what(), e.data_begin, e.data_end, data_size);
  uint64_t want_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t(e.element_size), &want_bytes);
  SPINDLE_CHECK(!overflow, format, "{}: {}: shape {} overflows 64-bit byte counts", source, what(),
                shape_str(e.shape));
  SPINDLE_CHECK(want_bytes == e.byte_size(), format,
                "{}: {}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", source,
                what(), e.data_begin, e.data_end, e.byte_size(), shape_str(e.shape), e.dtype,
                want_bytes);
  e.name = std::move(raw.name);  // last: the messages above name it
  return e;
}

// The header in ONE pass over its JSON, without a DOM of the whole header: entries are built
// as their objects close (only dtype, shape and data_offsets are kept, as small json values),
// "__metadata__" goes straight into the map, everything else is skipped. It rejects what the
// DOM would hide or choke on: nesting deeper than kMaxJsonDepth and a key repeated in any
// object (nlohmann's DOM silently keeps the last). Syntax and structure errors stop the parse
// through `error` (reported as "header ..."); an entry's own errors throw from end_object.
// A header with several faults reports the first one met in document order.
class HeaderBuilder : public nlohmann::json_sax<json> {
 public:
  HeaderBuilder(SafetensorsHeader& out, uint64_t data_size, const std::string& source)
      : out_(out), data_size_(data_size), source_(source) {}
  std::string error;

  bool null() override { return scalar(json(nullptr)); }
  bool boolean(bool v) override { return scalar(json(v)); }
  bool number_integer(number_integer_t v) override { return scalar(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
  bool string(string_t& v) override { return scalar(json(std::move(v))); }
  bool binary(binary_t&) override { return scalar(json(nullptr)); }  // not in text JSON

  bool start_object(std::size_t) override { return open(/*object=*/true); }
  bool start_array(std::size_t) override { return open(/*object=*/false); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (f.kind == Kind::root) {
      if (k == "__metadata__" && std::exchange(metadata_seen_, true)) return duplicate(k, true);
    } else if (f.kind == Kind::metadata) {
      if (out_.metadata.count(k) != 0) return duplicate(k, false);
    } else {
      if (std::find(f.keys.begin(), f.keys.end(), k) != f.keys.end()) return duplicate(k, false);
      f.keys.push_back(k);
    }
    f.key = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error = fmt::format("not valid JSON: {}", ex.what());
    return false;
  }

  // Called after a successful parse: a header that is not an object refused, entries sorted by
  // name, a name given twice refused.
  void finish() {
    if (root_type_ != nullptr) {
      SPINDLE_THROW(format, "{}: header must be a JSON object, got {}", source_, root_type_);
    }
    auto& entries = out_.entries;
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (size_t i = 1; i < entries.size(); ++i) {
      SPINDLE_CHECK(entries[i - 1].name != entries[i].name, format,
                    "{}: header duplicate key '{}' (two tensors with the same name)", source_,
                    clip(entries[i].name));
    }
  }

 private:
  // root: the header object; metadata: "__metadata__"; entry: a tensor's object; field: a
  // value under construction for one of the entry's kept fields; skip: anything else.
  enum class Kind { root, metadata, entry, field, skip };
  struct Frame {
    Frame(Kind k, bool is_object, json* v = nullptr) : kind(k), object(is_object), value(v) {}
    Kind kind;
    bool object;
    json* value;                    // field frames: the container being filled
    std::string key;                // the last key of an object frame
    std::vector<std::string> keys;  // entry / field / skip objects: keys seen (small objects)
  };

  bool duplicate(const std::string& k, bool top) {
    error = fmt::format("duplicate key '{}'{}", clip(k),
                        top ? " (two tensors with the same name)" : "");
    return false;
  }

  // The slot of the entry's kept field named `key`, or null for a key to skip.
  std::optional<json>* field_slot(const std::string& key) {
    if (key == "dtype") return &entry_.dtype;
    if (key == "shape") return &entry_.shape;
    if (key == "data_offsets") return &entry_.data_offsets;
    return nullptr;
  }

  // A value (scalar, or a container now opening) inside the current frame. Returns the json
  // to fill when the value belongs to a kept field, else null.
  json* place(json v) {
    Frame& f = frames_.back();
    switch (f.kind) {
      case Kind::entry:
        if (auto* slot = field_slot(f.key)) return &slot->emplace(std::move(v));
        return nullptr;
      case Kind::field:
        if (f.object) return &((*f.value)[f.key] = std::move(v));
        f.value->push_back(std::move(v));
        return &f.value->back();
      default:
        return nullptr;
    }
  }

  bool scalar(json v) {
    if (frames_.empty()) {  // reported by finish(), so a syntax error still comes first
      root_type_ = v.type_name();
      return true;
    }
    Frame& f = frames_.back();
    if (f.kind == Kind::root) return wrong_top_value(f.key, v.type_name());
    if (f.kind == Kind::metadata) {
      SPINDLE_CHECK(v.is_string(), format,
                    "{}: __metadata__ value of '{}' must be a string, got {}", source_, clip(f.key),
                    v.type_name());
      out_.metadata.emplace(std::move(f.key), std::move(v.get_ref<std::string&>()));
      return true;
    }
    place(std::move(v));
    return true;
  }

  bool wrong_top_value(const std::string& key, const char* type) {
    if (key == "__metadata__") {
      SPINDLE_THROW(format, "{}: __metadata__ must be an object, got {}", source_, type);
    }
    SPINDLE_THROW(format, "{}: tensor '{}': entry must be an object, got {}", source_, clip(key),
                  type);
  }

  bool open(bool object) {
    if (++depth_ > kMaxJsonDepth) {
      error = fmt::format("JSON nests deeper than {} levels", kMaxJsonDepth);
      return false;
    }
    const char* type = object ? "object" : "array";
    if (frames_.empty()) {
      if (!object) root_type_ = type;  // skipped, then reported by finish()
      frames_.push_back({object ? Kind::root : Kind::skip, object});
      return true;
    }
    Frame& f = frames_.back();
    switch (f.kind) {
      case Kind::root:
        if (!object) return wrong_top_value(f.key, type);
        if (f.key == "__metadata__") {
          frames_.push_back({Kind::metadata, true});
        } else {
          entry_ = RawEntry{std::move(f.key), {}, {}, {}};
          frames_.push_back({Kind::entry, true});
        }
        return true;
      case Kind::metadata:
        SPINDLE_THROW(format, "{}: __metadata__ value of '{}' must be a string, got {}", source_,
                      clip(f.key), type);
      case Kind::entry:
      case Kind::field:
        if (json* v = place(object ? json::object() : json::array())) {
          frames_.push_back({Kind::field, object, v});
          return true;
        }
        break;
      case Kind::skip:
        break;
    }
    frames_.push_back({Kind::skip, object});
    return true;
  }

  bool close() {
    --depth_;
    const Kind kind = frames_.back().kind;
    frames_.pop_back();
    if (kind == Kind::entry) out_.entries.push_back(parse_entry(entry_, data_size_, source_));
    return true;
  }

  SafetensorsHeader& out_;
  const uint64_t data_size_;
  const std::string& source_;
  std::vector<Frame> frames_;
  RawEntry entry_;  // the entry being read (entries do not nest)
  bool metadata_seen_ = false;
  const char* root_type_ = nullptr;  // the header's JSON type when it is not an object
  int depth_ = 0;
};

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

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  HeaderBuilder builder(h, data_size, source);
  if (!json::sax_parse(text, text + n, &builder)) {
    SPINDLE_THROW(format, "{}: header {}", source,
                  builder.error.empty() ? std::string("is not valid JSON") : builder.error);
  }
  builder.finish();

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

SafetensorsHeader read_safetensors_header(const FileReader& reader, const std::string& source,
                                          std::vector<uint8_t>* raw) {
  const uint64_t size = reader.size();
  std::vector<uint8_t> head(size_t(std::min<uint64_t>(size, 8)));
  reader.read_at(0, head.data(), head.size());
  if (head.size() == 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[size_t(i)];
    // Read the JSON only when the length is sane; otherwise the parser reports the length.
    if (n <= size - 8 && n <= kSafetensorsMaxHeaderBytes) {
      head.resize(size_t(8 + n));
      reader.read_at(8, head.data() + 8, size_t(n));
    }
  }
  SafetensorsHeader header = parse_safetensors_header(head.data(), head.size(), size, source);
  if (raw != nullptr) *raw = std::move(head);
  return header;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : reader_(path), header_(read_safetensors_header(reader_, path.string())) {}

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
