// libFuzzer entry point for the tokenizer.json loader (engine::tokenizer_from_json). The input
// is a whole tokenizer.json. spindle::Error is the loader's only allowed failure; any other
// exception escapes (the fuzzer reports it). A tokenizer that loads must then encode and decode
// without failing: a fixed text and the input's own first bytes, with and without special
// tokens, and every id it returns must be inside its vocabulary.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "spindle/core/error.h"
#include "spindle/engine/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<spindle::engine::Tokenizer> tok;
  try {
    tok = spindle::engine::tokenizer_from_json(text, "fuzz-input");
  } catch (const spindle::Error& e) {
    if (e.code() == spindle::ErrorCode::internal) std::abort();  // a broken invariant is a bug
    return 0;
  }
  const int32_t vocab = tok->vocab_size();
  if (vocab < 0) std::abort();
  const std::string samples[] = {"Hello, world! 12 + 30 = 42\n\t\xc3\xa9t\xc3\xa9 <|endoftext|>",
                                 text.substr(0, 256)};
  for (const std::string& s : samples) {
    for (bool specials : {false, true}) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(s, {.add_special_tokens = specials, .parse_special = specials});
      } catch (const spindle::Error& e) {
        // A vocabulary without a byte's token cannot encode it: a clear not_found is allowed.
        if (e.code() == spindle::ErrorCode::internal) std::abort();
        continue;
      }
      for (int32_t id : ids) {
        if (id < 0 || id >= vocab) std::abort();
      }
      (void)tok->decode(ids);
    }
  }
  for (const auto& t : tok->special_tokens()) {
    if (t.id < 0 || t.id >= vocab) std::abort();
  }
  return 0;
}
