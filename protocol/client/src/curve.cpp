// CURVE key generation and key files.

#include "spindle/protocol/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace spindle::protocol {

namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& why) {
  throw std::runtime_error(file.string() + ": " + why);
}

void write_file(const std::filesystem::path& file, const std::string& text, mode_t mode) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) fail(tmp, std::strerror(errno));
  ::fchmod(fd, mode);  // O_CREAT's mode is masked by umask; an existing file keeps its own
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) fail(tmp, std::strerror(err));
  if (::rename(tmp.c_str(), file.c_str()) != 0) fail(file, std::strerror(errno));
}

std::string read_first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail(file, "cannot open");
  std::string line;
  std::getline(in, line);
  return trim(line);
}

}  // namespace

bool is_z85_key(std::string_view key) {
  if (key.size() != 40) return false;
  for (char c : key)
    if (kZ85.find(c) == std::string_view::npos) return false;
  return true;
}

CurveKeyPair curve_keypair() {
  char pub[41] = {};
  char sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return {pub, sec};
}

std::string curve_public_key(const std::string& secret_key) {
  if (!is_z85_key(secret_key)) throw std::runtime_error("not a z85 CURVE key (40 characters)");
  char pub[41] = {};
  if (zmq_curve_public(pub, secret_key.c_str()) != 0)
    throw std::runtime_error(std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
  return pub;
}

CurveKeyPair load_or_create_keypair(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::exists(dir)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) fail(dir, ec.message());
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  const std::filesystem::path key_file = dir / (name + ".key");
  const std::filesystem::path pub_file = dir / (name + ".pub");
  CurveKeyPair pair;
  if (std::filesystem::exists(key_file)) {
    pair.secret_key = read_first_line(key_file);
    if (!is_z85_key(pair.secret_key)) fail(key_file, "not a z85 CURVE secret key");
    pair.public_key = curve_public_key(pair.secret_key);
  } else {
    pair = curve_keypair();
    write_file(key_file, pair.secret_key + "\n", 0600);
  }
  std::string existing;
  if (std::filesystem::exists(pub_file)) existing = read_first_line(pub_file);
  if (existing != pair.public_key) write_file(pub_file, pair.public_key + "\n", 0644);
  return pair;
}

std::vector<std::string> read_public_keys(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail(file, "cannot open");
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (!is_z85_key(line))
      fail(file, "line " + std::to_string(n) + " is not a z85 CURVE public key (40 characters)");
    keys.push_back(line);
  }
  return keys;
}

}  // namespace spindle::protocol
