#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

namespace ts::engine {
namespace {

Sequence make_seq(int32_t n, int32_t start = 1, std::string ns = "") {
  Sequence s;
  for (int32_t i = 0; i < n; ++i) s.tokens.push_back(start + i);
  s.num_prompt_tokens = n;
  s.cache_namespace = std::move(ns);
  return s;
}

TEST(KvCacheManager, AllocatesBlocksForTokensAndFreesThem) {
  BlockPool pool(8, true);
  KvCacheManager kv(pool, 16);
  Sequence s = make_seq(40);
  EXPECT_EQ(kv.num_blocks_needed(s, 40), 3);
  ASSERT_TRUE(kv.allocate_slots(s, 40));
  EXPECT_EQ(s.block_table.size(), 3u);
  s.num_computed_tokens = 40;
  EXPECT_EQ(kv.num_blocks_needed(s, 8), 0);  // fits in the third block
  EXPECT_EQ(kv.num_blocks_needed(s, 9), 1);
  kv.commit_computed(s);
  EXPECT_EQ(pool.num_cached(), 2);           // two full blocks registered
  kv.free(s);
  EXPECT_TRUE(s.block_table.empty());
  EXPECT_EQ(s.num_computed_tokens, 0);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.num_cached_free(), 2);
}

TEST(KvCacheManager, RefusesWhenPoolTooSmallWithoutSideEffects) {
  BlockPool pool(2, true);
  KvCacheManager kv(pool, 4);
  Sequence s = make_seq(12);
  EXPECT_FALSE(kv.allocate_slots(s, 12));
  EXPECT_TRUE(s.block_table.empty());
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(KvCacheManager, PrefixLookupReusesFullBlocksAndLeavesLastToken) {
  BlockPool pool(16, true);
  KvCacheManager kv(pool, 16);
  Sequence a = make_seq(40);
  ASSERT_TRUE(kv.allocate_slots(a, 40));
  a.num_computed_tokens = 40;
  kv.commit_computed(a);

  Sequence b = make_seq(40);  // same prompt
  EXPECT_EQ(kv.acquire_cached_prefix(b), 32);
  EXPECT_EQ(b.num_computed_tokens, 32);
  ASSERT_EQ(b.block_table.size(), 2u);
  EXPECT_EQ(b.block_table[0], a.block_table[0]);
  EXPECT_EQ(b.block_table[1], a.block_table[1]);
  EXPECT_EQ(pool.ref_count(a.block_table[0]), 2);

  Sequence c = make_seq(32);  // exactly two full blocks: the last token must be computed
  EXPECT_EQ(kv.acquire_cached_prefix(c), 16);

  Sequence d = make_seq(40, 1, "other-tenant");
  EXPECT_EQ(kv.acquire_cached_prefix(d), 0);

  Sequence e = make_seq(40);
  e.tokens[20] = 999;  // diverges in the second block
  EXPECT_EQ(kv.acquire_cached_prefix(e), 16);

  for (Sequence* s : {&a, &b, &c, &d, &e}) kv.free(*s);
  EXPECT_EQ(pool.num_used(), 0);
  // Finished blocks stay cached and are found again.
  Sequence f = make_seq(40);
  EXPECT_EQ(kv.acquire_cached_prefix(f), 32);
  kv.free(f);
  EXPECT_EQ(pool.num_free(), 16);
}

TEST(KvCacheManager, RegistersBlocksFilledByDecoding) {
  BlockPool pool(4, true);
  KvCacheManager kv(pool, 4);
  Sequence s = make_seq(3);
  ASSERT_TRUE(kv.allocate_slots(s, 3));
  s.num_computed_tokens = 3;
  kv.commit_computed(s);
  EXPECT_EQ(pool.num_cached(), 0);
  s.tokens.push_back(50);  // decode fills the first block
  ASSERT_TRUE(kv.allocate_slots(s, 1));
  s.num_computed_tokens = 4;
  kv.commit_computed(s);
  EXPECT_EQ(pool.num_cached(), 1);
  kv.free(s);
  Sequence t = make_seq(3);
  t.tokens.push_back(50);
  t.tokens.push_back(7);
  EXPECT_EQ(kv.acquire_cached_prefix(t), 4);
  kv.free(t);
}

TEST(KvCacheManager, NoCachingMeansNoHits) {
  BlockPool pool(8, false);
  KvCacheManager kv(pool, 4);
  Sequence a = make_seq(12);
  ASSERT_TRUE(kv.allocate_slots(a, 12));
  a.num_computed_tokens = 12;
  kv.commit_computed(a);
  kv.free(a);
  Sequence b = make_seq(12);
  EXPECT_EQ(kv.acquire_cached_prefix(b), 0);
  EXPECT_EQ(pool.num_free(), 8);
}

}  // namespace
}  // namespace ts::engine
