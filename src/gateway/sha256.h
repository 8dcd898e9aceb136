// SHA-256 (FIPS 180-4) and the random secrets used for API keys.
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ts::gateway {

// 32-byte digest of `data`.
std::array<uint8_t, 32> sha256(std::string_view data);

// Lower-case hex of sha256(data) (64 characters).
std::string sha256_hex(std::string_view data);

// Incremental SHA-256 for data that arrives in pieces (large files).
class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  std::string hex_digest();  // lower-case hex; the object is spent afterwards
 private:
  uint32_t state_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// Lower-case hex SHA-256 of a file's content, read in 1 MiB pieces. kNotFound if unreadable.
Result<std::string> sha256_file_hex(const std::string& path);

// `length` characters from [0-9A-Za-z], uniformly drawn from /dev/urandom (rejection sampling).
// kInternal when /dev/urandom cannot be read.
Result<std::string> random_base62(size_t length);

}  // namespace ts::gateway
