// libFuzzer entry point for the safetensors header parser. The input is a whole file: the
// 8-byte length, the JSON header and the data section. spindle::Error is the parser's only
// allowed failure; any other exception escapes (and the fuzzer reports it), and a header
// that parses must satisfy the invariants the loaders rely on, or the process aborts.

#include <cstdint>
#include <cstdlib>

#include "spindle/core/error.h"
#include "spindle/engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spindle::engine::SafetensorsHeader h;
  try {
    h = spindle::engine::parse_safetensors_header(data, size, size, "fuzz-input");
  } catch (const spindle::Error& e) {
    if (e.code() == spindle::ErrorCode::internal) std::abort();  // a broken invariant is a bug
    return 0;
  }
  if (h.data_offset < 8 || h.data_offset > size) std::abort();
  const uint64_t data_size = size - h.data_offset;
  for (const auto& e : h.entries) {
    if (e.data_begin > e.data_end || e.data_end > data_size) std::abort();
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) std::abort();
      numel *= uint64_t(d);  // cannot overflow: the parser checked numel · size == byte_size
    }
    if (numel * e.element_size != e.byte_size()) std::abort();
    if (h.find(e.name) != &e) std::abort();
  }
  return 0;
}
