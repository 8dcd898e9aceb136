#include "engine/kv_budget.h"

#include <gtest/gtest.h>

namespace ts::engine {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(KvBudget, ShareOfMemoryLeftAfterTheWeights) {
  // Qwen2.5-0.5B-shaped: 12 KiB of f16 KV per token, 32k context, 64 sequences would want 24 GiB.
  auto b = default_kv_budget({.mem_available_bytes = 5 * kGiB, .weight_bytes = 1 * kGiB,
                              .kv_bytes_per_token = 12 * 1024, .max_seqs = 64, .max_model_len = 32768});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->bytes, static_cast<int64_t>(0.9 * 4 * kGiB));
  EXPECT_FALSE(b->capped_by_use);
  EXPECT_NE(b->explanation.find("MemAvailable 5.0 GiB - weights 1.0 GiB"), std::string::npos) << b->explanation;
  // It holds the whole 32k context of one sequence (384 MiB), unlike the old fixed 256 MiB.
  EXPECT_GE(b->bytes, 32768 * 12 * 1024);
}

TEST(KvBudget, CappedAtWhatTheEngineCanUse) {
  // stories260K-sized: 640 B per token, 128-token context, 64 sequences: 5 MiB is all it can use.
  auto b = default_kv_budget({.mem_available_bytes = 20 * kGiB, .weight_bytes = kMiB,
                              .kv_bytes_per_token = 640, .max_seqs = 64, .max_model_len = 128});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes, 64 * 128 * 640);
  EXPECT_TRUE(b->capped_by_use);
  EXPECT_NE(b->explanation.find("capped at 64 sequences x 128 tokens"), std::string::npos) << b->explanation;
}

TEST(KvBudget, CeilingUnlessOneSequenceNeedsMore) {
  // 64 x 32k x 12 KiB = 24 GiB could be used, 45 GiB are free: the 8 GiB ceiling applies.
  auto b = default_kv_budget({.mem_available_bytes = 51 * kGiB, .weight_bytes = kGiB,
                              .kv_bytes_per_token = 12 * 1024, .max_seqs = 64, .max_model_len = 32768});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes, 8 * kGiB);
  EXPECT_TRUE(b->capped_by_use);
  EXPECT_NE(b->explanation.find("capped at 8.0 GiB"), std::string::npos) << b->explanation;
  // A 128k context of 96 KiB per token needs 12 GiB for one sequence: the ceiling rises to it.
  auto big = default_kv_budget({.mem_available_bytes = 51 * kGiB, .weight_bytes = kGiB,
                                .kv_bytes_per_token = 96 * 1024, .max_seqs = 64, .max_model_len = 131072});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->bytes, 12 * kGiB);
}

TEST(KvBudget, NothingLeftAfterTheWeightsGivesZero) {
  auto b = default_kv_budget({.mem_available_bytes = kGiB, .weight_bytes = 2 * kGiB,
                              .kv_bytes_per_token = 1024, .max_seqs = 4, .max_model_len = 4096});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes, 0);
}

TEST(KvBudget, BadInputsAreErrors) {
  EXPECT_FALSE(default_kv_budget({.mem_available_bytes = kGiB, .kv_bytes_per_token = 0, .max_seqs = 1,
                                  .max_model_len = 1}).ok());
  EXPECT_FALSE(default_kv_budget({.mem_available_bytes = kGiB, .kv_bytes_per_token = 1, .max_seqs = 1,
                                  .max_model_len = 1, .utilization = 1.5}).ok());
  EXPECT_FALSE(default_kv_budget({.mem_available_bytes = kGiB, .kv_bytes_per_token = 1, .max_seqs = 0,
                                  .max_model_len = 1}).ok());
}

TEST(KvBudget, ParsesMemAvailable) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20971520 kB\n"
      "Buffers:          100 kB\n";
  auto m = parse_mem_available(meminfo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(*m, 20 * kGiB);
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(format_bytes(1536 * kMiB), "1.5 GiB");
  EXPECT_EQ(format_bytes(300 * kMiB), "300.0 MiB");
}

TEST(KvBudget, WindowAwareSequenceBytesSetTheCaps) {
  // Gemma-3-1B-shaped (f16, 16-token blocks): 4 KiB per token of global layers plus at most
  // 6 x 33 blocks of window; a 32k sequence holds 147 MiB instead of 26 KiB x 32768 = 832 MiB.
  const int64_t per_token = 26 * 1024, per_seq = (2048 + 6 * 33) * 65536;
  auto b = default_kv_budget({.mem_available_bytes = 64 * kGiB, .weight_bytes = 2 * kGiB,
                              .kv_bytes_per_token = per_token, .kv_bytes_per_seq = per_seq, .max_seqs = 4,
                              .max_model_len = 32768});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes, 4 * per_seq);  // what 4 sequences can use, not 4 x 832 MiB
  EXPECT_TRUE(b->capped_by_use);
  EXPECT_FALSE(default_kv_budget({.mem_available_bytes = kGiB, .kv_bytes_per_token = 1, .kv_bytes_per_seq = -1,
                                  .max_seqs = 1, .max_model_len = 1})
                   .ok());
}

}  // namespace
}  // namespace ts::engine
