#pragma once
// SHA-256 (FIPS 180-4) for content addressing: blob ids and revision ids are lowercase hex
// digests. Implemented over OpenSSL's EVP interface (libcrypto), which uses the CPU's SHA
// extensions where present (~2 GB/s vs ~0.25 GB/s for portable C): every blob read is
// verified, so hashing speed is on the cold-load path.
//
// Thread-safety: a Sha256 object is used by one thread at a time; the free functions are
// thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spindle::adapters {

inline constexpr size_t kSha256HexChars = 64;

// Streaming hasher: update() any number of times, then finish() exactly once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The 32-byte digest. Throws internal when called twice.
  std::array<uint8_t, 32> finish();
  std::string finish_hex();

 private:
  void* ctx_;  // EVP_MD_CTX*
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);
std::string to_hex(const uint8_t* bytes, size_t n);

// True for exactly 64 lowercase hex digits (the only spelling Spindle writes or accepts).
bool is_sha256_hex(std::string_view s);

}  // namespace spindle::adapters
