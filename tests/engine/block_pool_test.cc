#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace ts::engine {
namespace {

std::vector<int32_t> toks(int32_t start, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

TEST(BlockPool, AllocatesEveryBlockOnceThenFails) {
  BlockPool pool(4, true);
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(pool.allocate());
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.num_used(), 4);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  pool.release(got[2]);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(), got[2]);
  for (int32_t b : got) pool.release(b);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.num_cached_free(), 0);
}

TEST(BlockPool, RefCountsKeepSharedBlocksUsed) {
  BlockPool pool(2, true);
  const int32_t b = pool.allocate();
  auto t = toks(10, 4);
  const uint64_t h = BlockPool::chain_hash(BlockPool::kRootHash, t, "");
  ASSERT_TRUE(pool.register_full(b, h, BlockPool::kRootHash, t, ""));
  pool.acquire(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.num_used(), 1);
  pool.release(b);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_cached_free(), 1);
  // Cached-free block is found and revived by acquire.
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, t, ""), b);
  pool.acquire(b);
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.num_used(), 1);
  pool.release(b);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedOnlyWhenNeeded) {
  BlockPool pool(3, true);
  int32_t b[3];
  uint64_t h[3];
  std::vector<int32_t> t[3];
  for (int i = 0; i < 3; ++i) {
    b[i] = pool.allocate();
    t[i] = toks(100 * i, 4);
    h[i] = BlockPool::chain_hash(BlockPool::kRootHash, t[i], "ns");
    ASSERT_TRUE(pool.register_full(b[i], h[i], BlockPool::kRootHash, t[i], "ns"));
  }
  pool.release(b[1]);
  pool.release(b[0]);
  pool.release(b[2]);
  EXPECT_EQ(pool.num_cached_free(), 3);
  EXPECT_EQ(pool.num_cached(), 3);
  // The first allocation must evict b[1] (released first), the others stay findable.
  EXPECT_EQ(pool.allocate(), b[1]);
  EXPECT_EQ(pool.find(h[1], BlockPool::kRootHash, t[1], "ns"), -1);
  EXPECT_EQ(pool.find(h[0], BlockPool::kRootHash, t[0], "ns"), b[0]);
  EXPECT_EQ(pool.find(h[2], BlockPool::kRootHash, t[2], "ns"), b[2]);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.allocate(), b[0]);
  pool.release(b[1]);
  pool.release(b[0]);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.num_cached_free(), 1);
  pool.clear_cache();
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_free(), 3);
}

TEST(BlockPool, HashChainsParentAndNamespace) {
  auto t = toks(5, 16);
  const uint64_t a = BlockPool::chain_hash(BlockPool::kRootHash, t, "tenant-a");
  const uint64_t b = BlockPool::chain_hash(BlockPool::kRootHash, t, "tenant-b");
  const uint64_t c = BlockPool::chain_hash(a, t, "tenant-a");
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, BlockPool::chain_hash(BlockPool::kRootHash, t, "tenant-a"));
  auto t2 = t;
  t2[15] += 1;
  EXPECT_NE(a, BlockPool::chain_hash(BlockPool::kRootHash, t2, "tenant-a"));
}

TEST(BlockPool, FindVerifiesContentAndNamespace) {
  BlockPool pool(2, true);
  auto t = toks(1, 4);
  const uint64_t h = BlockPool::chain_hash(BlockPool::kRootHash, t, "a");
  const int32_t blk = pool.allocate();
  ASSERT_TRUE(pool.register_full(blk, h, BlockPool::kRootHash, t, "a"));
  auto other = toks(2, 4);
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, other, "a"), -1);  // forged hash, other tokens
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, t, "b"), -1);      // other tenant
  EXPECT_EQ(pool.find(h, 12345, t, "a"), -1);                     // other parent
  EXPECT_EQ(pool.find(h, BlockPool::kRootHash, t, "a"), blk);
  // A second block with the same content is not registered twice.
  const int32_t blk2 = pool.allocate();
  EXPECT_FALSE(pool.register_full(blk2, h, BlockPool::kRootHash, t, "a"));
  pool.release(blk2);
  pool.release(blk);
  EXPECT_EQ(pool.num_cached_free(), 1);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, CachingDisabledNeverRegisters) {
  BlockPool pool(1, false);
  auto t = toks(1, 4);
  const int32_t blk = pool.allocate();
  EXPECT_FALSE(pool.register_full(blk, 1, BlockPool::kRootHash, t, ""));
  pool.release(blk);
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.find(1, BlockPool::kRootHash, t, ""), -1);
}

}  // namespace
}  // namespace ts::engine
