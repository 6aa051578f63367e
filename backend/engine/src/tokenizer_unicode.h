#pragma once
// Unicode services for the tokenizers, backed by ICU (icu-uc). Thread-safe: ICU's NFC
// instance and property lookups are immutable after first use.

#include <string>
#include <string_view>

namespace spindle::engine {

// NFC of `text`. Maximal well-formed UTF-8 runs are normalized; bytes that are not well-formed
// UTF-8 are copied through unchanged and split the runs (so the result round-trips them).
// ASCII-only text is returned unchanged without calling ICU.
std::string nfc_normalize(std::string_view text);

// Unicode White_Space (what Rust's and Oniguruma's `\s` match).
bool is_white_space(char32_t cp);

// Rust regex `\w`: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t cp);

}  // namespace spindle::engine
