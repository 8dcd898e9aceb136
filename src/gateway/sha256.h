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

// `length` characters from [0-9A-Za-z], uniformly drawn from /dev/urandom (rejection sampling).
// kInternal when /dev/urandom cannot be read.
Result<std::string> random_base62(size_t length);

}  // namespace ts::gateway
