#pragma once
// Reader for cereal's portable binary format (the 'B' encoding), bounded by its input.
//
// cereal::PortableBinaryInputArchive resizes a string or vector to the length the input claims
// before reading it, so a 20-byte header claiming a 2^40-byte string allocates (and zero-fills)
// that much. This archive reads the identical format from a byte range and refuses any length
// larger than the bytes left, growing vectors of objects element by element, so memory stays
// proportional to the input. Writing still uses cereal::PortableBinaryOutputArchive; tests read
// its output with this archive (and this archive's input with cereal's) to keep them identical.
//
// Format (cereal 1.3): byte 0 is 1 when the data is little-endian (0: big-endian, swapped on
// read); integers and IEEE floats in that byte order at their natural size; bool one byte
// (0/1; anything else is refused here); strings and vectors a u64 count then the elements; a
// class's u32 version before its first instance in the archive; names are not written.
//
// Since names are not written, a reader cannot skip fields it does not know: a class version
// above the one this build declares (CEREAL_CLASS_VERSION) is refused, naming the field, rather
// than misread ("body.sampling_params: class version 2 is newer than this side reads (1)").
// Errors name the field path ("body.data[3].model_input.shape: truncated ...").

#include <cereal/cereal.hpp>
#include <cereal/details/helpers.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace spindle::protocol::detail {

class BinaryReader : public cereal::InputArchive<BinaryReader, cereal::AllowEmptyClassElision> {
 public:
  explicit BinaryReader(std::string_view data)
      : cereal::InputArchive<BinaryReader, cereal::AllowEmptyClassElision>(this), data_(data) {
    uint8_t little = 0;
    read(&little, 1, 1);
    if (little > 1)
      throw cereal::Exception("endianness byte is " + std::to_string(little) + ", not 0 or 1");
    swap_ = little != 1;  // this host is little-endian (wire.h static_asserts it)
  }

  // Reads `n` bytes of elements `elem` bytes wide, swapping each element when needed.
  void read(void* out, size_t n, size_t elem) {
    if (n > remaining())
      fail("truncated: needs " + std::to_string(n) + " more bytes at offset " +
           std::to_string(pos_) + ", has " + std::to_string(remaining()));
    if (n == 0) return;  // `out` may be an empty vector's null data()
    std::memcpy(out, data_.data() + pos_, n);
    pos_ += n;
    if (swap_ && elem > 1) {
      auto* p = static_cast<uint8_t*>(out);
      for (size_t i = 0; i < n; i += elem)
        for (size_t j = 0; j < elem / 2; ++j) std::swap(p[i + j], p[i + elem - 1 - j]);
    }
  }

  // Reads a count and refuses it when even `min_bytes` per element would overrun the input.
  uint64_t read_count(size_t min_bytes, const char* what) {
    uint64_t n = 0;
    read(&n, sizeof n, sizeof n);
    if (min_bytes > 0 && n > remaining() / min_bytes)
      fail(std::string(what) + " of " + std::to_string(n) + " elements but only " +
           std::to_string(remaining()) + " bytes left at offset " + std::to_string(pos_));
    return n;
  }

  std::string_view take(size_t n) {
    if (n > remaining()) fail("truncated string");
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }

  // Field path of the value being read: a member name per NameValuePair, "[i]" per element.
  void push(std::string label) { path_.push_back(std::move(label)); }
  void pop() { path_.pop_back(); }
  std::string path() const {
    std::string out;
    for (const std::string& l : path_) {
      if (!out.empty() && l[0] != '[') out += '.';
      out += l;
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& what) const {
    const std::string p = path();
    throw cereal::Exception(p.empty() ? what : p + ": " + what);
  }

  // The class versions this build declares for the structs being read, innermost last.
  void begin_class(uint32_t known) { known_versions_.push_back(known); }
  void end_class() { known_versions_.pop_back(); }
  // Called with the class version just read for the innermost struct.
  void check_class_version(uint32_t version) {
    const uint32_t known = known_versions_.empty() ? 0 : known_versions_.back();
    if (version <= known) return;
    pop();  // name the struct, not its version field
    fail("class version " + std::to_string(version) + " is newer than this side reads (" +
         std::to_string(known) +
         "): the binary encoding cannot skip unknown fields (write version " +
         std::to_string(known) + ", or use the J encoding)");
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool swap_ = false;
  std::vector<std::string> path_;
  std::vector<uint32_t> known_versions_;
};

// Each struct read records the version this build declares for it (its CEREAL_CLASS_VERSION).
template <class T>
struct IsBinaryWrapper : std::false_type {};
template <class T>
struct IsBinaryWrapper<cereal::NameValuePair<T>> : std::true_type {};
template <class T>
struct IsBinaryWrapper<cereal::SizeTag<T>> : std::true_type {};
template <class T>
  requires(std::is_class_v<T> && !IsBinaryWrapper<T>::value)
void prologue(BinaryReader& ar, const T&) {
  ar.begin_class(cereal::detail::Version<T>::version);
}
template <class T>
  requires(std::is_class_v<T> && !IsBinaryWrapper<T>::value)
void epilogue(BinaryReader& ar, const T&) {
  ar.end_class();
}

template <class T>
std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>> CEREAL_LOAD_FUNCTION_NAME(
    BinaryReader& ar, T& t) {
  ar.read(&t, sizeof t, sizeof t);
}

inline void CEREAL_LOAD_FUNCTION_NAME(BinaryReader& ar, bool& b) {
  uint8_t v = 0;
  ar.read(&v, 1, 1);
  if (v > 1) ar.fail("bool byte is " + std::to_string(v) + ", not 0 or 1");
  b = v == 1;
}

template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(BinaryReader& ar, cereal::NameValuePair<T>& t) {
  ar.push(t.name);
  ar(t.value);
  if constexpr (std::is_same_v<std::decay_t<T>, uint32_t>) {
    if (std::string_view(t.name) == "cereal_class_version") ar.check_class_version(t.value);
  }
  ar.pop();
}

template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(BinaryReader& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
}

inline void CEREAL_LOAD_FUNCTION_NAME(BinaryReader& ar, std::string& s) {
  const uint64_t n = ar.read_count(1, "string");
  s.assign(ar.take(size_t(n)));
}

// More specialized than cereal's generic vector load, so it wins for this archive.
template <class T, class A>
void CEREAL_LOAD_FUNCTION_NAME(BinaryReader& ar, std::vector<T, A>& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const uint64_t n = ar.read_count(sizeof(T), "vector");
    v.resize(size_t(n));
    ar.read(v.data(), size_t(n) * sizeof(T), sizeof(T));
  } else {
    // Every element type on the wire takes at least one byte.
    const uint64_t n = ar.read_count(1, "vector");
    v.clear();
    for (uint64_t i = 0; i < n; ++i) {
      v.emplace_back();
      ar.push("[" + std::to_string(i) + "]");
      ar(v.back());
      ar.pop();
    }
  }
}

}  // namespace spindle::protocol::detail
