// KvCacheManager with several KV groups (a hybrid model's full-attention and sliding-window
// layers): per-group block tables, sliding-window blocks released as a sequence advances,
// prefix hits that need only the window's blocks (and shorten when those were evicted),
// rollback and free per group, and the pool intact afterwards.
#include <gtest/gtest.h>

#include "engine/kv_cache_manager.h"

namespace ts::engine {
namespace {

constexpr int32_t kNo = KvCacheManager::kNoBlock;

Sequence make_seq(int32_t n, int32_t start = 1) {
  Sequence s;
  for (int32_t i = 0; i < n; ++i) s.tokens.push_back(start + i);
  s.num_prompt_tokens = n;
  return s;
}

int32_t held(const Sequence& s, int32_t g) {
  int32_t n = 0;
  for (int32_t b : KvCacheManager::table(s, g)) n += b != kNo ? 1 : 0;
  return n;
}

// Computes `n` more tokens of a sequence as the engine does: allocate, compute, commit.
void advance(KvCacheManager& kv, Sequence& s, int32_t n) {
  ASSERT_TRUE(kv.allocate_slots(s, n));
  s.num_computed_tokens += n;
  kv.commit_computed(s);
}

// One full-attention group and two window-8 groups, 4-token blocks: a window of 8 positions
// spans at most ceil(7 / 4) + 1 = 3 blocks.
constexpr int32_t kBs = 4, kWindow = 8, kCap = 3;

TEST(KvGroups, SlidingWindowGroupsHoldOnlyTheirWindow) {
  BlockPool pool(200, true);
  KvCacheManager kv(pool, kBs, {0, kWindow, kWindow});
  Sequence s = make_seq(100);
  EXPECT_EQ(kv.num_blocks_needed(s, 10), 3 * 3);
  advance(kv, s, 10);  // the next query (position 10) reads 3..10: block 0 still needed
  for (int g = 0; g < 3; ++g) EXPECT_EQ(held(s, g), 3) << g;
  advance(kv, s, 2);   // next query 12 reads 5..12: block 0 (0..3) released in both window groups
  EXPECT_EQ(held(s, 0), 3);
  EXPECT_EQ(KvCacheManager::table(s, 1)[0], kNo);
  EXPECT_EQ(KvCacheManager::table(s, 2)[0], kNo);
  EXPECT_EQ(held(s, 1), 2);
  while (s.num_computed_tokens < 99) {
    advance(kv, s, 1);
    const int32_t n = s.num_computed_tokens;
    ASSERT_EQ(held(s, 0), (n + kBs - 1) / kBs) << n;
    for (int g = 1; g < 3; ++g) {
      ASSERT_LE(held(s, g), kCap) << n;
      // Exactly the blocks from the one holding position n - window + 1 on are held.
      const auto& t = KvCacheManager::table(s, g);
      for (int32_t b = 0; b < static_cast<int32_t>(t.size()); ++b) {
        ASSERT_EQ(t[static_cast<size_t>(b)] == kNo, (b + 1) * kBs <= n - kWindow + 1) << "n " << n << " block " << b;
      }
    }
    ASSERT_EQ(pool.num_used(), kv.num_held_blocks(s));
  }
  // 99 tokens: 25 blocks of the full group + 2 x 2 window blocks, instead of 3 x 25.
  EXPECT_EQ(kv.num_held_blocks(s), 25 + 2 + 2);
  kv.free(s);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free(), 200);
}

TEST(KvGroups, CachingOffStillReleasesWindowBlocks) {
  BlockPool pool(100, false);
  KvCacheManager kv(pool, kBs, {0, kWindow});
  Sequence s = make_seq(64);
  advance(kv, s, 16);
  for (int i = 0; i < 40; ++i) advance(kv, s, 1);
  EXPECT_EQ(held(s, 0), 14);
  EXPECT_LE(held(s, 1), kCap);
  EXPECT_EQ(pool.num_cached(), 0);
  kv.free(s);
  EXPECT_EQ(pool.num_free(), 100);
}

// Sequence A (40 tokens) computed in chunks and freed: every full block is cached in every group
// (window blocks released early were registered first, so they stay cached until evicted).
// Returns A's full-attention block table.
std::vector<int32_t> run_and_free_a(KvCacheManager& kv) {
  Sequence a = make_seq(40);
  advance(kv, a, 10);
  advance(kv, a, 10);
  advance(kv, a, 20);
  std::vector<int32_t> t = a.block_table;
  kv.free(a);
  return t;
}

TEST(KvGroups, PrefixHitNeedsOnlyTheWindowBlocks) {
  BlockPool pool(200, true);
  KvCacheManager kv(pool, kBs, {0, kWindow, kWindow});
  const std::vector<int32_t> a = run_and_free_a(kv);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_cached(), 3 * 10);  // 10 full blocks in each of the 3 groups

  Sequence b = make_seq(40);  // same tokens: 9 blocks reusable (the last token is recomputed)
  EXPECT_EQ(kv.acquire_cached_prefix(b), 36);
  EXPECT_EQ(b.num_computed_tokens, 36);
  ASSERT_EQ(b.block_table.size(), 9u);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(b.block_table[static_cast<size_t>(i)], a[static_cast<size_t>(i)]);
  // Window groups: the next query (36) reads 29..36, so only blocks 7 and 8 are taken.
  for (int g = 1; g < 3; ++g) {
    const auto& t = KvCacheManager::table(b, g);
    ASSERT_EQ(t.size(), 9u);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(t[static_cast<size_t>(i)], kNo) << g << " " << i;
    EXPECT_NE(t[7], kNo);
    EXPECT_NE(t[8], kNo);
    EXPECT_EQ(pool.ref_count(t[7]), 1);
  }
  EXPECT_EQ(pool.num_used(), 9 + 2 + 2);
  advance(kv, b, 4);
  EXPECT_EQ(b.num_computed_tokens, 40);
  kv.free(b);
  EXPECT_EQ(pool.num_used(), 0);
}

// Protects the given cached blocks, evicts every other cached block by allocating the whole
// pool, then gives everything back: the cache keeps exactly the protected blocks.
void evict_all_but(BlockPool& pool, const std::vector<int32_t>& keep) {
  for (int32_t b : keep) pool.acquire(b);
  std::vector<int32_t> taken;
  for (int32_t b; (b = pool.allocate()) >= 0;) taken.push_back(b);
  for (int32_t b : taken) pool.release(b);
  for (int32_t b : keep) pool.release(b);
}

// The block ids a fresh lookup of A's tokens finds in one group (-1 where not cached).
std::vector<int32_t> cached_ids(BlockPool& pool, int32_t group, int32_t n_blocks) {
  Sequence s = make_seq(40);
  std::vector<int32_t> ids;
  uint64_t parent = BlockPool::kRootHash;
  for (int32_t i = 0; i < n_blocks; ++i) {
    std::span<const int32_t> toks(s.tokens.data() + i * kBs, kBs);
    const uint64_t h = BlockPool::chain_hash(parent, toks, "");
    ids.push_back(pool.find(h, parent, toks, "", group));
    parent = h;
  }
  return ids;
}

TEST(KvGroups, PrefixHitShortensWhenWindowBlocksWereEvicted) {
  BlockPool pool(200, true);
  KvCacheManager kv(pool, kBs, {0, kWindow, kWindow});
  run_and_free_a(kv);
  const auto f = cached_ids(pool, 0, 10), w1 = cached_ids(pool, 1, 10), w2 = cached_ids(pool, 2, 10);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(f[i] >= 0 && w1[i] >= 0 && w2[i] >= 0) << i;
  // Keep the full group's blocks and the window groups' blocks 3 and 4 only.
  std::vector<int32_t> keep(f.begin(), f.end());
  for (const auto* w : {&w1, &w2}) keep.insert(keep.end(), {(*w)[3], (*w)[4]});
  evict_all_but(pool, keep);
  EXPECT_EQ(pool.num_cached(), 14);

  // 9 blocks would need window blocks 7, 8 (evicted); 8 needs 6, 7; ... 5 blocks need only 3, 4.
  Sequence b = make_seq(40);
  EXPECT_EQ(kv.acquire_cached_prefix(b), 20);
  ASSERT_EQ(b.block_table.size(), 5u);
  EXPECT_EQ(KvCacheManager::table(b, 1), (std::vector<int32_t>{kNo, kNo, kNo, w1[3], w1[4]}));
  EXPECT_EQ(KvCacheManager::table(b, 2), (std::vector<int32_t>{kNo, kNo, kNo, w2[3], w2[4]}));
  advance(kv, b, 20);
  kv.free(b);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvGroups, PrefixHitMustSuitEveryWindowGroup) {
  BlockPool pool(200, true);
  KvCacheManager kv(pool, kBs, {0, kWindow, kWindow});
  run_and_free_a(kv);
  const auto f = cached_ids(pool, 0, 10), w1 = cached_ids(pool, 1, 10), w2 = cached_ids(pool, 2, 10);
  // Group 1 keeps blocks 7, 8 (good for a 9-block hit); group 2 keeps 3, 4 (good for 5): no
  // length suits both, so nothing is reused.
  std::vector<int32_t> keep(f.begin(), f.end());
  keep.insert(keep.end(), {w1[7], w1[8], w2[3], w2[4]});
  evict_all_but(pool, keep);
  Sequence b = make_seq(40);
  EXPECT_EQ(kv.acquire_cached_prefix(b), 0);
  EXPECT_TRUE(b.block_table.empty());
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(KvGroups, SpeculativeRollbackAndFreePerGroup) {
  BlockPool pool(100, true);
  KvCacheManager kv(pool, kBs, {0, kWindow});
  Sequence s = make_seq(30);
  advance(kv, s, 20);
  // One verified token and 7 drafts: positions 20..27, two more blocks in each group.
  for (int i = 0; i < 7; ++i) s.tokens.push_back(200 + i);
  EXPECT_EQ(kv.num_blocks_needed(s, 8), 2 * 2);
  ASSERT_TRUE(kv.allocate_slots(s, 8));
  EXPECT_EQ(s.block_table.size(), 7u);
  EXPECT_EQ(KvCacheManager::table(s, 1).size(), 7u);
  // The verified token and one draft accepted: KV valid up to 22.
  s.tokens.resize(23);
  s.num_computed_tokens = 22;
  kv.truncate_to_computed(s);
  kv.commit_computed(s);
  EXPECT_EQ(s.block_table.size(), 6u);
  EXPECT_EQ(KvCacheManager::table(s, 1).size(), 6u);
  EXPECT_LE(held(s, 1), kCap);
  EXPECT_EQ(pool.num_used(), kv.num_held_blocks(s));
  kv.free(s);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_free(), 100);
}

TEST(KvGroups, SameTokensInTwoGroupsAreCachedApart) {
  BlockPool pool(8, true);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  const uint64_t h = BlockPool::chain_hash(BlockPool::kRootHash, toks, "");
  const int32_t a = pool.allocate(), b = pool.allocate();
  EXPECT_TRUE(pool.register_full(a, h, BlockPool::kRootHash, toks, "", 0));
  EXPECT_TRUE(pool.register_full(b, h, BlockPool::kRootHash, toks, "", 1));
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, toks, "", 0), a);
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, toks, "", 1), b);
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, toks, "", 2), -1);
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, toks, "tenant-b", 1), -1);
}

}  // namespace
}  // namespace ts::engine
