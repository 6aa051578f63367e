#include "spindle/adapters/sha256.h"

#include <openssl/evp.h>

#include "spindle/core/error.h"

namespace spindle::adapters {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  SPINDLE_CHECK(ctx_ != nullptr, resource, "sha256: EVP_MD_CTX_new failed (out of memory)");
  if (EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
    SPINDLE_THROW(internal, "sha256: EVP_DigestInit_ex failed");
  }
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::update(const void* data, size_t n) {
  SPINDLE_CHECK(!finished_, internal, "sha256: update after finish");
  if (n == 0) return;
  SPINDLE_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) == 1, internal,
                "sha256: EVP_DigestUpdate failed");
}

std::array<uint8_t, 32> Sha256::finish() {
  SPINDLE_CHECK(!finished_, internal, "sha256: finish called twice");
  finished_ = true;
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  SPINDLE_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len) == 1 &&
                    len == out.size(),
                internal, "sha256: EVP_DigestFinal_ex failed");
  return out;
}

std::string Sha256::finish_hex() {
  const auto d = finish();
  return to_hex(d.data(), d.size());
}

std::string to_hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish_hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != kSha256HexChars) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace spindle::adapters
