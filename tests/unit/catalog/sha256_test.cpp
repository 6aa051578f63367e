// SHA-256 against the NIST FIPS 180-4 example vectors (and streaming == one shot).

#include <gtest/gtest.h>

#include <string>

#include "spindle/adapters/sha256.h"
#include "spindle/core/error.h"

namespace spindle::adapters {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                       "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingMatchesOneShot) {
  std::string data;
  for (int i = 0; i < 10007; ++i) data.push_back(char(i * 31 + 7));
  Sha256 h;
  for (size_t at = 0; at < data.size(); at += 333) {
    h.update(std::string_view(data).substr(at, 333));
  }
  EXPECT_EQ(h.finish_hex(), sha256_hex(data));
  EXPECT_THROW(h.finish(), Error);
}

TEST(Sha256, HexSpelling) {
  EXPECT_TRUE(is_sha256_hex(sha256_hex("x")));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a')));
  EXPECT_FALSE(is_sha256_hex(std::string(64, 'A')));  // lowercase only
  EXPECT_FALSE(is_sha256_hex(std::string(64, 'g')));
}

}  // namespace
}  // namespace spindle::adapters
