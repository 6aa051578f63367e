#pragma once
// A cereal output "archive" that writes nothing: it walks a message through its own serialize()
// and hands every string, number and TensorRef to a Visitor together with the field path
// ("data[3].loss_fn_inputs[0].tensor"). validate_request uses it for the checks that apply to
// every field (string sizes, finite numbers, tensor frames); the JSON encoder uses it to refuse
// non-finite numbers and to repair invalid UTF-8 before cereal writes.
//
// Contract of Visitor::string: the string is passed mutable. A visitor may change it only when
// the walked object is not const (the JSON encoder walks its own copy).

#include <cereal/cereal.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "spindle/protocol/messages.h"

namespace spindle::protocol::detail {

class Walker : public cereal::OutputArchive<Walker, cereal::AllowEmptyClassElision> {
 public:
  struct Visitor {
    virtual ~Visitor() = default;
    virtual void string(const Walker&, std::string&) {}
    virtual void number(const Walker&, double) {}
    virtual void tensor(const Walker&, const TensorRef&) {}
  };

  explicit Walker(Visitor& visitor)
      : cereal::OutputArchive<Walker, cereal::AllowEmptyClassElision>(this), visitor_(visitor) {
    levels_.push_back({});
  }

  // The path of the value being visited, e.g. "sequences[1].tokens".
  std::string path() const {
    std::string out;
    for (const Level& l : levels_) {
      if (l.name.empty()) continue;
      if (!out.empty() && l.name[0] != '[') out += '.';
      out += l.name;
    }
    return out;
  }
  // The innermost field name ("" inside an array).
  std::string_view field() const {
    for (auto it = levels_.rbegin(); it != levels_.rend(); ++it)
      if (!it->name.empty()) return it->name;
    return {};
  }

  Visitor& visitor() { return visitor_; }
  void push_name(const char* name) { levels_.push_back({name, false, 0}); }
  void pop() { levels_.pop_back(); }
  void mark_array() {
    levels_.back().array = true;
    levels_.back().next = 0;
  }
  void begin_value() {
    Level& top = levels_.back();
    if (top.array)
      levels_.push_back({"[" + std::to_string(top.next++) + "]", false, 0});
    else
      levels_.push_back({});
  }
  bool is_version_field() const { return field() == "cereal_class_version"; }

 private:
  struct Level {
    std::string name;
    bool array = false;
    size_t next = 0;
  };
  Visitor& visitor_;
  std::vector<Level> levels_;
};

template <class T>
void prologue(Walker& w, const T& value) {
  w.begin_value();
  if constexpr (std::is_same_v<T, TensorRef>) w.visitor().tensor(w, value);
}
template <class T>
void epilogue(Walker& w, const T&) {
  w.pop();
}
template <class T>
void prologue(Walker&, const cereal::NameValuePair<T>&) {}
template <class T>
void epilogue(Walker&, const cereal::NameValuePair<T>&) {}
template <class T>
void prologue(Walker&, const cereal::SizeTag<T>&) {}
template <class T>
void epilogue(Walker&, const cereal::SizeTag<T>&) {}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(Walker& w, const cereal::NameValuePair<T>& nvp) {
  w.push_name(nvp.name);
  w(nvp.value);
  w.pop();
}
template <class T>
void CEREAL_SAVE_FUNCTION_NAME(Walker& w, const cereal::SizeTag<T>&) {
  w.mark_array();
}
template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(Walker& w, const T& v) {
  if (!w.is_version_field()) w.visitor().number(w, double(v));
}
inline void CEREAL_SAVE_FUNCTION_NAME(Walker& w, const std::string& s) {
  w.visitor().string(w, const_cast<std::string&>(s));  // see the Visitor::string contract
}

template <class T>
void walk(const T& value, Walker::Visitor& visitor) {
  Walker w(visitor);
  w(value);
}

}  // namespace spindle::protocol::detail
