#include "gateway/sha256.h"

#include <gtest/gtest.h>

#include <set>

namespace ts::gateway {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, EveryTailLengthAroundABlock) {
  // 55, 56 and 64 bytes need one or two padding blocks; compare against known digests.
  EXPECT_EQ(sha256_hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(RandomBase62, LengthAlphabetAndUniqueness) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    auto s = random_base62(40);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->size(), 40u);
    for (char c : *s) ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << *s;
    seen.insert(*s);
  }
  EXPECT_EQ(seen.size(), 200u);
}

TEST(Sha256, IncrementalInOddPiecesEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7 + 3);
  for (size_t piece : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (size_t off = 0; off < data.size(); off += piece) h.update(std::string_view(data).substr(off, piece));
    EXPECT_EQ(h.hex_digest(), sha256_hex(data)) << "pieces of " << piece;
  }
  Sha256 empty;
  EXPECT_EQ(empty.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace ts::gateway
