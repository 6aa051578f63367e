#pragma once
// Reader for the 'J' encoding: a cereal input archive over an already parsed rapidjson object.
//
// It reads what cereal::JSONOutputArchive writes, by the rules of PROTOCOL.md 2.1, which are
// cereal 1.3's JSONInputArchive's: members found by name in any order, unknown members ignored,
// every member present, "cereal_class_version" read from the first object of each struct type
// (the base InputArchive decides which). Unlike cereal's reader it checks each value's JSON type
// and range before taking it, so every error names the field path and what was found
// ("body.data[0].model_input.frame: expected an integer (u32), got the string \"0\"") instead of
// a rapidjson assertion, and strings are read whole (an escaped \u0000 is a NUL byte, as in 'B').
//
// Errors are cereal::Exception (the codec turns them into ProtocolError bad_request).

// cereal's json.hpp first: it makes RAPIDJSON_ASSERT throw rather than abort, for every user of
// rapidjson in this library (this reader checks types first, so none should fire).
#include <cereal/archives/json.hpp>
#include <cereal/cereal.hpp>
#include <rapidjson/document.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace spindle::protocol::detail {

class JsonReader : public cereal::InputArchive<JsonReader> {
 public:
  // `root` (an object) must outlive the reader.
  explicit JsonReader(const rapidjson::Value& root)
      : cereal::InputArchive<JsonReader>(this) {
    nodes_.push_back({&root, std::string(), 0});
  }

  // The member name of the next value (set by a NameValuePair, used by the next read).
  void set_next_name(const char* name) { next_name_ = name; }

  // Enters the next value, which must be an object (a struct) or an array (a vector).
  void start_node(bool array) {
    const rapidjson::Value& v = take();
    if (array ? !v.IsArray() : !v.IsObject())
      fail(std::string(array ? "expected an array" : "expected an object") + ", got " +
           describe(v));
    nodes_.push_back({&v, current_, 0});
  }
  void finish_node() {
    nodes_.pop_back();
    current_.clear();
  }
  // Elements of the array entered last.
  uint64_t array_size() const { return nodes_.back().value->Size(); }

  template <class T>
  void read_number(T& out) {
    const rapidjson::Value& v = take();
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.IsBool()) fail("expected true or false, got " + describe(v));
      out = v.GetBool();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.IsNumber()) fail("expected a number, got " + describe(v));
      out = T(v.GetDouble());
    } else if constexpr (std::is_signed_v<T>) {
      if (!v.IsInt64()) fail("expected an integer (" + type_name<T>() + "), got " + describe(v));
      const int64_t x = v.GetInt64();
      if (x < int64_t(std::numeric_limits<T>::min()) || x > int64_t(std::numeric_limits<T>::max()))
        fail("expected an integer (" + type_name<T>() + "), got " + std::to_string(x) +
             " (out of range)");
      out = T(x);
    } else {
      if (!v.IsUint64())
        fail("expected a non-negative integer (" + type_name<T>() + "), got " + describe(v));
      const uint64_t x = v.GetUint64();
      if (x > uint64_t(std::numeric_limits<T>::max()))
        fail("expected a non-negative integer (" + type_name<T>() + "), got " + std::to_string(x) +
             " (out of range)");
      out = T(x);
    }
  }

  void read_string(std::string& out) {
    const rapidjson::Value& v = take();
    if (!v.IsString()) fail("expected a string, got " + describe(v));
    out.assign(v.GetString(), v.GetStringLength());
  }

  // "body.data[0].model_input.frame": the value being read.
  std::string path() const {
    std::string out;
    const auto add = [&](const std::string& label) {
      if (label.empty()) return;
      if (!out.empty() && label[0] != '[') out += '.';
      out += label;
    };
    for (const Node& n : nodes_) add(n.label);
    add(current_);
    return out;
  }

  [[noreturn]] void fail(const std::string& what) const {
    const std::string p = path();
    throw cereal::Exception(p.empty() ? what : p + ": " + what);
  }

 private:
  struct Node {
    const rapidjson::Value* value;
    std::string label;    // member name or "[i]"; "" for the root
    rapidjson::SizeType next;  // arrays: the next element to read
  };

  // The next value: the named member of the current object, or the current array's next element.
  const rapidjson::Value& take() {
    Node& top = nodes_.back();
    const char* name = next_name_;
    next_name_ = nullptr;
    if (top.value->IsArray()) {
      current_ = "[" + std::to_string(top.next) + "]";
      if (top.next >= top.value->Size()) fail("past the end of the array");
      return (*top.value)[top.next++];
    }
    if (name == nullptr) fail("a value without a member name");  // no message field does this
    current_ = name;
    const auto it = top.value->FindMember(name);
    if (it == top.value->MemberEnd()) {
      if (current_ == "cereal_class_version")
        fail("missing (it must be in the first object of each struct type; simplest: put "
             "\"cereal_class_version\": 1 in every struct object)");
      fail("missing (every member must be present: there are no defaults on the wire)");
    }
    return it->value;
  }

  static std::string describe(const rapidjson::Value& v) {
    if (v.IsNull()) return "null";
    if (v.IsBool()) return v.GetBool() ? "true" : "false";
    if (v.IsObject()) return "an object";
    if (v.IsArray()) return "an array";
    if (v.IsString()) {
      std::string s = "the string \"";
      const std::string_view text(v.GetString(), v.GetStringLength());
      for (char c : text.substr(0, 32)) s += (c >= 0x20 && c < 0x7f) ? c : '?';
      return s + (text.size() > 32 ? "...\"" : "\"");
    }
    if (v.IsUint64()) return std::to_string(v.GetUint64());
    if (v.IsInt64()) return std::to_string(v.GetInt64());
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g (not an integer)", v.GetDouble());
    return buf;
  }

  template <class T>
  static std::string type_name() {
    return std::string(std::is_signed_v<T> ? "i" : "u") + std::to_string(8 * sizeof(T));
  }

  std::vector<Node> nodes_;
  const char* next_name_ = nullptr;
  std::string current_;  // label of the value read last (errors name it)
};

template <class T>
struct IsVector : std::false_type {};
template <class T, class A>
struct IsVector<std::vector<T, A>> : std::true_type {};
template <class T>
struct IsWrapper : std::false_type {};
template <class T>
struct IsWrapper<cereal::NameValuePair<T>> : std::true_type {};
template <class T>
struct IsWrapper<cereal::SizeTag<T>> : std::true_type {};

template <class T>
inline constexpr bool kIsJsonNode =
    std::is_class_v<T> && !std::is_same_v<T, std::string> && !IsWrapper<T>::value;

// Structs and vectors are JSON nodes (objects and arrays); name-value pairs, size tags,
// numbers and strings are not.
template <class T>
  requires(kIsJsonNode<T>)
void prologue(JsonReader& ar, const T&) {
  ar.start_node(IsVector<T>::value);
}
template <class T>
  requires(kIsJsonNode<T>)
void epilogue(JsonReader& ar, const T&) {
  ar.finish_node();
}
template <class T>
void prologue(JsonReader&, const cereal::NameValuePair<T>&) {}
template <class T>
void epilogue(JsonReader&, const cereal::NameValuePair<T>&) {}
template <class T>
void prologue(JsonReader&, const cereal::SizeTag<T>&) {}
template <class T>
void epilogue(JsonReader&, const cereal::SizeTag<T>&) {}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(JsonReader& ar, cereal::NameValuePair<T>& t) {
  ar.set_next_name(t.name);
  ar(t.value);
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(JsonReader& ar, cereal::SizeTag<T>& t) {
  t.size = static_cast<std::remove_reference_t<T>>(ar.array_size());
}
template <class T>
  requires(std::is_arithmetic_v<T>)
void CEREAL_LOAD_FUNCTION_NAME(JsonReader& ar, T& t) {
  ar.read_number(t);
}
inline void CEREAL_LOAD_FUNCTION_NAME(JsonReader& ar, std::string& s) { ar.read_string(s); }

// More specialized than cereal's generic vector load, so it wins for this archive.
template <class T, class A>
void CEREAL_LOAD_FUNCTION_NAME(JsonReader& ar, std::vector<T, A>& v) {
  cereal::size_type n = 0;
  ar(cereal::make_size_tag(n));
  v.clear();
  v.reserve(size_t(n));  // n is an array the parsed document holds: bounded by the input
  for (cereal::size_type i = 0; i < n; ++i) {
    v.emplace_back();
    ar(v.back());
  }
}

}  // namespace spindle::protocol::detail
