#pragma once
/// \file curve.h
/// CURVE keys for ZeroMQ over TCP (PROTOCOL.md "Security"). Keys are Z85 text, 40 characters.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::protocol {

struct CurveKeyPair {
  std::string public_key;  // z85, 40 chars
  std::string secret_key;  // z85, 40 chars
};

/// A fresh key pair (zmq_curve_keypair). Throws std::runtime_error when libzmq lacks CURVE.
CurveKeyPair curve_keypair();

/// True for 40 characters of the Z85 alphabet.
bool is_z85_key(std::string_view key);

/// The public key of a z85 secret key. Throws std::runtime_error on a malformed key.
std::string curve_public_key(const std::string& secret_key);

/// Loads `<dir>/<name>.key` (the secret key, one line, mode 0600) or, when absent, creates a
/// pair and writes it (the .key atomically with mode 0600, then `<name>.pub`). The public key
/// is always derived from the secret one; a missing or stale `.pub` is rewritten. Creates `dir`
/// (0700) when needed. Throws std::runtime_error naming the file.
CurveKeyPair load_or_create_keypair(const std::filesystem::path& dir,
                                    const std::string& name = "server");

/// Public keys from a text file: one z85 key per line; blank lines and lines starting with '#'
/// (after leading spaces) are skipped, trailing spaces trimmed. Throws std::runtime_error naming
/// the file and line of anything that is not a key.
std::vector<std::string> read_public_keys(const std::filesystem::path& file);

}  // namespace spindle::protocol
