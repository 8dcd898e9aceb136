#include "tokenizer/unicode.h"
#include "tokenizer/wpm.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ts::tokenizer::internal {
namespace {

TEST(Unicode, ByteLevelMappingIsABijection) {
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    const std::string_view u = byte_to_unicode_utf8(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(std::string(u)).second) << b;
    EXPECT_EQ(byte_level_to_bytes(u), std::string(1, static_cast<char>(b)));
  }
  // GPT-2's well-known images: ' ' -> 'Ġ' (U+0120), '\n' -> 'Ċ' (U+010A), 'a' -> 'a'.
  EXPECT_EQ(byte_to_unicode_utf8(' '), "\xC4\xA0");
  EXPECT_EQ(byte_to_unicode_utf8('\n'), "\xC4\x8A");
  EXPECT_EQ(byte_to_unicode_utf8('a'), "a");
  EXPECT_EQ(unicode_to_byte(0x120), ' ');
  EXPECT_EQ(unicode_to_byte(0x4E2D), -1);

  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
  // Code points outside the mapping are kept as their UTF-8 text.
  EXPECT_EQ(byte_level_to_bytes("\xE4\xB8\xAD"), "\xE4\xB8\xAD");
}

TEST(Unicode, WellFormedLength) {
  EXPECT_EQ(utf8_well_formed_len("a"), 1);
  EXPECT_EQ(utf8_well_formed_len("\xC3\xA9"), 2);
  EXPECT_EQ(utf8_well_formed_len("\xE4\xB8\xAD"), 3);
  EXPECT_EQ(utf8_well_formed_len("\xF0\x9F\xA6\x99"), 4);
  EXPECT_EQ(utf8_well_formed_len("\xE4\xB8"), -1);      // incomplete
  EXPECT_EQ(utf8_well_formed_len("\xF0\x9F"), -1);
  EXPECT_EQ(utf8_well_formed_len("\x80"), 0);           // stray continuation
  EXPECT_EQ(utf8_well_formed_len("\xC0\xAF"), 0);       // overlong
  EXPECT_EQ(utf8_well_formed_len("\xE0\x80\x80"), 0);   // overlong
  EXPECT_EQ(utf8_well_formed_len("\xED\xA0\x80"), 0);   // surrogate
  EXPECT_EQ(utf8_well_formed_len("\xF4\x90\x80\x80"), 0);  // > U+10FFFF
  EXPECT_EQ(utf8_well_formed_len("\xE4\x41"), 0);
}

TEST(Unicode, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_sanitize("ok"), "ok");
  EXPECT_EQ(utf8_sanitize("\xE4\xB8" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(utf8_sanitize("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_sanitize("a\xF0\x9F\xA6"), "a\xEF\xBF\xBD");
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Unicode, WordPiecePreprocessing) {
  using V = std::vector<std::string>;
  // Lowercase + first NFD code point (accents go), punctuation and CJK as one-character words,
  // whitespace splits, control characters vanish.
  EXPECT_EQ(WpmModel::preprocess("Héllo, WORLD!\t你好 Ünï\x01" "code ДОМ"),
            (V{"hello", ",", "world", "!", "你", "好", "unicode", "дом"}));
  EXPECT_EQ(WpmModel::preprocess("  \n "), V{});
  EXPECT_EQ(WpmModel::preprocess("a+b"), (V{"a", "+", "b"}));         // ASCII symbol splits
  EXPECT_EQ(WpmModel::preprocess("a€b"), (V{"a€b"}));  // a non-ASCII symbol does not
  EXPECT_EQ(WpmModel::preprocess("\xEA\xB0\x80"), (V{"\xE1\x84\x80"}));  // 가 -> leading jamo
}

}  // namespace
}  // namespace ts::tokenizer::internal
