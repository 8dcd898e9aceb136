// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE.
// Pure functions over tables built once (thread-safe after first use).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ts::tokenizer::internal {

// Length of the UTF-8 sequence announced by lead byte `b` (1 for continuation or invalid bytes,
// as llama.cpp's table: by high nibble 0-B -> 1, C-D -> 2, E -> 3, F -> 4).
inline size_t utf8_seq_len(uint8_t b) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// GPT-2 byte-level mapping: every byte maps to one printable code point.
// byte_to_unicode_utf8(b) is that code point's UTF-8 text.
std::string_view byte_to_unicode_utf8(uint8_t b);
// Inverse: the byte for code point `cp`, or -1 when `cp` is not in the mapping.
int unicode_to_byte(uint32_t cp);
// Maps each byte of `bytes` to its code point (the text a byte-level BPE vocabulary uses).
std::string bytes_to_byte_level(std::string_view bytes);
// Inverse of bytes_to_byte_level; code points outside the mapping are copied as UTF-8 text.
std::string byte_level_to_bytes(std::string_view text);

// Length of the well-formed UTF-8 sequence starting at s[0] (Unicode Table 3-7), 0 when the
// bytes there cannot start a well-formed sequence, or -1 when they are a valid but incomplete
// prefix of one (more bytes needed). `s` must not be empty.
int utf8_well_formed_len(std::string_view s);

// Replaces every ill-formed sequence in `s` by U+FFFD (one per maximal ill-formed subpart).
std::string utf8_sanitize(std::string_view s);

}  // namespace ts::tokenizer::internal
